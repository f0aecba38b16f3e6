"""One branch's kept output, job output and private TMPDIR are unreadable to another's commands.

Both branches run as the same uid, so file modes do not separate them; the
confinement must: every confined launch hides the folder all branches' kept
output and Landlock temporary directories live in, and grants back only the
launching branch's own temporary directory.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory._os import isolation as isolation_module
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import REGISTRY, jobs_tool

PY = shlex.quote(sys.executable)
TAG = "lf-private-bytes-5d1c"


@pytest.fixture(params=["system-tmp", "tmpdir-outside-tmp"])
def temp_root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Where the host's temporary files go: ``/tmp``, or a TMPDIR elsewhere (``/var/tmp``)."""
    monkeypatch.setattr(isolation_module, "_BASE", None)
    if request.param == "system-tmp":
        yield
        return
    outside = Path(tempfile.mkdtemp(prefix="lf-tmpdir-", dir="/var/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(outside))
    try:
        yield
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def make_branch(root: Path, mechanism: str) -> Branch:
    root.mkdir()
    branch = Branch()
    branch.register(bash_tool(workspace_root=root, isolation=mechanism))
    branch.register(jobs_tool())
    return branch


async def act(branch: Branch, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return dict(result.result)


@pytest.mark.usefixtures("temp_root")
@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_another_branch_cannot_read_kept_output_job_output_or_tmpdir(
    mechanism: str, tmp_path: Path
) -> None:
    owner = make_branch(tmp_path / "a", mechanism)
    other = make_branch(tmp_path / "b", mechanism)
    try:
        big = f"{PY} -c \"print('{TAG}' * 20000)\""
        kept = await act(owner, "bash", command=big)
        assert kept["output_id"], kept
        job = await act(owner, "bash", command=f"echo {TAG}; sleep 600", background=True)
        await act(owner, "jobs", action="wait", job_id=job["job_id"], until=TAG)
        note = await act(
            owner, "bash", command=f'echo {TAG} > "$TMPDIR/note" && echo "$TMPDIR/note"'
        )
        table = REGISTRY.tables[owner.id]
        assert table.directory is not None
        paths = [table.directory / kept["output_id"], table.directory / job["job_id"]]
        # The owner's TMPDIR as the host sees it (Landlock: a host folder;
        # bwrap: a tmpfs only its own sandbox has).
        for supervisor in table.supervisors.values():
            if supervisor.tmpdir is not None:
                paths.append(supervisor.tmpdir / "note")
        paths.append(Path(note["stdout"].strip()))
        for path in paths:
            read = await act(other, "bash", command=f"cat {shlex.quote(str(path))}")
            assert TAG not in read["stdout"], (path, read)
            assert read["return_code"] != 0, (path, read)
        listed = await act(
            other, "bash", command=f"ls -R {shlex.quote(str(isolation_module.private_base()))}"
        )
        assert kept["output_id"] not in listed["stdout"] and "output-" not in listed["stdout"]
        # The owner still reads its own, through the tools.
        page = await act(owner, "jobs", action="output", job_id=kept["output_id"])
        assert TAG in page["output"]
    finally:
        await owner.aclose()
        await other.aclose()
