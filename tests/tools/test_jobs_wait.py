"""jobs wait and output: patterns that cannot hang the loop, ports in the job's own network, pages.

Real jobs under each mechanism; `until` runs on RE2 (linear time) in a
worker; ``port`` is probed inside the job's sandbox; paging never splits a
UTF-8 character.
"""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory.tools import jobs as jobs_module
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import jobs_tool, read_output

PY = shlex.quote(sys.executable)


def make_branch(root: Path, **options: Any) -> Branch:
    root.mkdir(exist_ok=True)
    branch = Branch()
    branch.register(bash_tool(workspace_root=root, **options))
    branch.register(jobs_tool())
    return branch


async def act(branch: Branch, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return dict(result.result)


async def test_a_catastrophic_pattern_returns_in_time_and_the_loop_stays_free(
    tmp_path: Path,
) -> None:
    branch = make_branch(tmp_path / "ws")
    try:
        job = await act(
            branch,
            "bash",
            command=f"{PY} -c \"print('a' * 60 + 'b', flush=True); import time; time.sleep(600)\"",
            background=True,
        )
        order: list[str] = []

        async def wait() -> None:
            # A backtracking engine needs about 2**60 steps for this.
            done = await act(
                branch, "jobs", action="wait", job_id=job["job_id"], until="(a+)+$", timeout=3000
            )
            assert done["matched"] is False and "3000 ms passed" in done["error"]
            order.append("wait")

        async def other() -> None:
            await trio.sleep(0.2)
            assert (await act(branch, "bash", command="echo free"))["stdout"] == "free\n"
            order.append("bash")

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                nursery.start_soon(other)
        assert order == ["bash", "wait"]
    finally:
        await branch.aclose()


async def test_bad_patterns_and_offsets_get_typed_errors(tmp_path: Path) -> None:
    branch = make_branch(tmp_path / "ws")
    try:
        job = await act(
            branch,
            "bash",
            command=f"{PY} -c \"print('up', flush=True); import time; time.sleep(600)\"",
            background=True,
        )
        for pattern, words in [
            ("a{99999999999}", "counts above 1000"),
            ("a{2000,}", "counts above 1000"),
            ("(", "not a valid regular expression"),
            (r"(a)\1", "RE2 syntax"),
        ]:
            done = await act(
                branch, "jobs", action="wait", job_id=job["job_id"], until=pattern, timeout=100
            )
            assert words in done["error"], (pattern, done)
        huge = await branch.act(
            "jobs", {"action": "output", "job_id": job["job_id"], "offset": 2**63}
        )
        assert not huge.ok and "unexpected" not in (huge.error or ""), huge.error
        assert "offset" in (huge.error or "")
        line = await act(branch, "jobs", action="wait", job_id=job["job_id"], until="^up$")
        assert line["matched"] is True
    finally:
        await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_a_port_wait_sees_the_jobs_network_and_never_the_hosts(
    mechanism: str, tmp_path: Path
) -> None:
    branch = make_branch(tmp_path / "ws", isolation=mechanism, network="none")
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    host_port = host.getsockname()[1]
    try:
        server = (
            f'{PY} -c "import socket, time; s = socket.socket(); '
            f"s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
            f'time.sleep(600)"'
        )
        job = await act(branch, "bash", command=server, background=True)
        printed = await act(
            branch, "jobs", action="wait", job_id=job["job_id"], until=r"^\d+$", timeout=30_000
        )
        port = int(printed["output"].split()[0])
        inside = await act(
            branch, "jobs", action="wait", job_id=job["job_id"], port=port, timeout=30_000
        )
        assert inside["matched"] is True, inside
        outside = await act(
            branch, "jobs", action="wait", job_id=job["job_id"], port=host_port, timeout=1000
        )
        assert outside["matched"] is False, outside
    finally:
        host.close()
        await branch.aclose()


def test_paging_over_multibyte_text_at_every_offset_returns_the_exact_text(
    tmp_path: Path,
) -> None:
    text = "€a€€b😀ç" * 5
    raw = text.encode()
    path = tmp_path / "out"
    path.write_bytes(raw)
    for limit in (1, 2, 3, 4, 5, 8):
        for offset in range(len(raw) + 1):
            pages, at = [], offset
            while True:
                page, end, size = read_output(path, at, limit)
                assert size == len(raw) and "\ufffd" not in page
                if end == at:
                    break
                pages.append(page)
                at = end
            start = offset
            while 0 < start < len(raw) and raw[start] & 0xC0 == 0x80:
                start -= 1
            assert "".join(pages) == raw[start:].decode(), (limit, offset)


async def test_a_page_of_a_job_never_splits_a_character(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "PAGE_BYTES", 7)
    branch = make_branch(tmp_path / "ws")
    try:
        job = await act(
            branch, "bash", command=f"{PY} -c \"print('€' * 10, end='')\"", background=True
        )
        await act(branch, "jobs", action="wait", job_id=job["job_id"], timeout=30_000)
        for offset in range(31):
            pages, at = [], offset
            while True:
                read = await act(branch, "jobs", action="output", job_id=job["job_id"], offset=at)
                if read["next_offset"] == at:
                    break
                pages.append(read["output"])
                at = read["next_offset"]
            assert "".join(pages) == "€" * (10 - offset // 3), offset
    finally:
        await branch.aclose()
