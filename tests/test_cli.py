"""The ``lionfactory`` command line: ``tools``, ``call`` and their exit statuses."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lionfactory._cli import BUILTIN_TOOLS, cli_factories, main, parse_assignments


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lionfactory`` as a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "lionfactory", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def readme(workspace: Path) -> Path:
    path = workspace / "README.md"
    path.write_text("# Title\nsecond line\n", encoding="utf-8")
    return path


def test_call_reader_json_prints_the_numbered_lines(workspace: Path, readme: Path) -> None:
    done = run_cli("call", "reader", "action=read", "path=README.md", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["success"] is True
    assert result["content"] == "1\t# Title\n2\tsecond line"


def test_invalid_input_exits_2_with_the_validation_errors(workspace: Path, readme: Path) -> None:
    done = run_cli("call", "reader", "action=reed", "path=README.md", cwd=workspace)
    assert done.returncode == 2
    assert "Invalid arguments for tool 'reader'" in done.stderr
    assert "- action: Input should be 'read', 'open' or 'list_dir' (got 'reed')" in done.stderr
    assert done.stdout == ""


def test_invalid_input_with_json_also_prints_the_errors_as_json(
    workspace: Path, readme: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "reader", "path=README.md", "--workspace", str(workspace), "--json"])
    out = capsys.readouterr()
    assert code == 2
    payload = json.loads(out.out)
    assert payload["error_type"] == "ToolInputError"
    assert [e["loc"] for e in payload["errors"]] == [["action"]]
    assert "action: Field required" in out.err


def test_a_typed_failure_exits_1_and_shows_the_error(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "reader", "action=read", "path=missing.md", "--workspace", str(workspace)])
    out = capsys.readouterr()
    assert code == 1
    assert "error: File not found: 'missing.md'" in out.err


def test_a_failing_bash_command_exits_1(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "bash", "command=false", "--workspace", str(workspace), "--json"])
    assert code == 1
    assert json.loads(capsys.readouterr().out)["return_code"] == 1


def test_call_without_json_prints_the_content(
    workspace: Path, readme: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "reader", "action=read", "path=README.md", "--workspace", str(workspace)])
    assert code == 0
    assert capsys.readouterr().out == "1\t# Title\n2\tsecond line\n"


def test_call_bash_without_json_prints_stdout(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "bash", "command=echo hi", "--workspace", str(workspace)])
    assert code == 0
    assert capsys.readouterr().out == "hi\n"


def test_json_values_are_parsed_and_limit_applies(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / "a.txt").write_text("1\n2\n3\n", encoding="utf-8")
    argv = ["call", "reader", "action=read", "path=a.txt", "offset=1", "limit=1", "--json"]
    code = main([*argv, "--workspace", str(workspace)])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["content"] == "2\t2"
    assert result["next_offset"] == 2


def test_the_workspace_option_sets_the_root(tmp_path: Path, workspace: Path, readme: Path) -> None:
    done = run_cli(
        "call", "reader", "action=read", "path=README.md", "--workspace", str(workspace),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1\t# Title")


def test_unknown_tool_exits_2_listing_the_tools(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["call", "nope", "--workspace", str(workspace)])
    err = capsys.readouterr().err
    assert code == 2
    assert "unknown tool 'nope'" in err
    assert "reader, editor, bash" in err


def test_a_word_without_equals_exits_2(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["call", "reader", "action", "--workspace", str(workspace)])
    assert code == 2
    assert "key=value" in capsys.readouterr().err


def test_a_missing_workspace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["call", "reader", "action=read", "path=x", "--workspace", str(tmp_path / "no")])
    assert code == 2
    assert "--workspace must be a directory" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: lionfactory" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "--help"]) == 0
    assert "Exit status: 0 on success" in " ".join(capsys.readouterr().out.split())


def test_tools_lists_every_builtin_with_a_summary(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tools", "--workspace", str(workspace)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[: len(BUILTIN_TOOLS)]] == list(BUILTIN_TOOLS)
    assert lines[0].startswith("reader      Read files")


def test_tools_names_the_isolation_the_coding_toolkit_would_use(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._os.isolation import workspace_isolation

    expected = workspace_isolation("auto", workspace.resolve()).mechanism
    assert main(["tools", "--workspace", str(workspace)]) == 0
    out = capsys.readouterr().out
    assert "Process isolation of the coding toolkit (and `mcp serve --toolkit coding`): " in out
    assert f"isolation: {expected} (" in out


def test_tools_json_prints_mcp_schemas(workspace: Path) -> None:
    done = run_cli("tools", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    schemas = json.loads(done.stdout)
    assert [s["name"] for s in schemas] == list(BUILTIN_TOOLS)
    reader = schemas[0]
    assert set(reader) == {"name", "description", "inputSchema"}
    assert reader["inputSchema"]["required"] == ["action", "path"]


def test_the_console_script_is_installed(workspace: Path, readme: Path) -> None:
    script = Path(sys.executable).with_name("lionfactory")
    assert script.exists(), "run `pip install -e .` so the console script exists"
    done = subprocess.run(
        [str(script), "call", "reader", "action=read", "path=README.md"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1\t# Title")


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["limit=10"], {"limit": 10}),
        (["flag=true", "none=null"], {"flag": True, "none": None}),
        (['types=[".py", ".md"]'], {"types": [".py", ".md"]}),
        (["text=hello world"], {"text": "hello world"}),
        (["empty="], {"empty": ""}),
        (["eq=a=b"], {"eq": "a=b"}),
    ],
)
def test_values_parse_as_json_when_they_parse(
    words: list[str], expected: dict[str, object]
) -> None:
    assert parse_assignments(words) == expected


def test_a_text_only_field_keeps_its_text() -> None:
    properties = {
        "path": {"type": "string"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    }
    assert parse_assignments(["path=2024", "note=true"], properties) == {
        "path": "2024",
        "note": "true",
    }


def test_a_repeated_key_is_refused() -> None:
    with pytest.raises(ValueError, match="'a' given twice"):
        parse_assignments(["a=1", "a=2"])


def test_one_json_object_is_the_arguments_as_a_model_sends_them() -> None:
    """A call copied from a transcript: types as written, text fields included."""
    properties = {"path": {"type": "string"}, "limit": {"type": "integer"}}
    assert parse_assignments(['  {"path": "a=b.py", "limit": 5}'], properties) == {
        "path": "a=b.py",
        "limit": 5,
    }


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (['{"path": "a.py"'], "not a valid JSON object"),
        (["[" * 100_000], "key=value words or one JSON object"),
        (["{" * 100_000], "not a valid JSON object"),
        (['{"path": "a.py"}', "limit=1"], "a JSON object is the only argument"),
        (["a.py"], "key=value words or one JSON object, got 'a.py'"),
    ],
)
def test_malformed_arguments_are_refused_with_what_to_do(words: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_assignments(words)


def test_call_takes_a_json_object_and_refuses_a_broken_one(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Title\n")
    ok = run_cli("call", "reader", '{"action": "read", "path": "notes.md"}', cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "# Title" in ok.stdout
    broken = run_cli("call", "reader", '{"path": ', cwd=tmp_path)
    assert broken.returncode == 2
    assert "not a valid JSON object" in broken.stderr
    unknown = run_cli("call", "reader", '{"action": "read", "pth": "notes.md"}', cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stdout
    assert "pth" in unknown.stderr + unknown.stdout


def test_the_package_and_the_cli_do_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys, lionfactory, lionfactory.tools, lionfactory.coding, lionfactory._cli\n"
        "from lionfactory.__main__ import main\n"
        "assert main(['tools']) == 0\n"
        "leaked = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))\n"
        "assert not leaked, leaked\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_version_prints_the_package_version() -> None:
    from lionfactory import __version__

    done = run_cli("--version", cwd=Path.cwd())
    assert done.returncode == 0
    assert done.stdout.strip() == f"lionfactory {__version__}"


def interrupt(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Ctrl-C as a terminal sends it (SIGINT to the process group); the status and stderr."""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


def test_ctrl_c_during_mcp_serve_exits_130_without_a_traceback(workspace: Path) -> None:
    pytest.importorskip("mcp")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lionfactory", "mcp", "serve", "--workspace", str(workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    proc.stdin.write(json.dumps(initialize).encode() + b"\n")
    proc.stdin.flush()
    # The answer proves the server is up and inside its event loop.
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "the server did not answer initialize"
    assert json.loads(proc.stdout.readline())["id"] == 1
    status, err = interrupt(proc)
    assert status == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_ctrl_c_during_a_long_call_exits_130_without_a_traceback(workspace: Path) -> None:
    fifo = workspace / "started"
    os.mkfifo(fifo)
    program = "open('started', 'w').write('x'); import time; time.sleep(120)"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lionfactory",
            "call",
            "bash",
            f'command={sys.executable} -c "{program}"',
        ],
        cwd=workspace,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # Opening the FIFO blocks until the command opens it for writing: then it runs.
    opened: list[str] = []
    reader = threading.Thread(target=lambda: opened.append(fifo.read_text()), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert opened == ["x"], proc.stderr.read() if proc.poll() is not None else "no start"
    status, err = interrupt(proc)
    assert status == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_serve_passes_the_protected_merge_permission_to_the_toolkit(workspace: Path) -> None:
    ((_, default),) = cli_factories("coding", ["sandbox"], workspace)
    assert "allow_merge_into_protected" not in default
    ((_, allowed),) = cli_factories(
        "coding", ["sandbox"], workspace, allow_merge_into_protected=True
    )
    assert allowed["allow_merge_into_protected"] is True
    with pytest.raises(ValueError, match="coding toolkit's sandbox"):
        cli_factories("standalone", None, workspace, allow_merge_into_protected=True)


def test_a_reader_that_goes_away_ends_the_call_quietly_with_status_141(workspace: Path) -> None:
    """``lionfactory call reader path=big.txt | head -1``: no traceback, not a tool failure.

    The reply (about 300 KB) is several times the pipe's buffer, so the
    command is still writing when the reading end closes.
    """
    lines = "".join(f"{i:06d} {'x' * 150}\n" for i in range(5000))
    (workspace / "big.txt").write_text(lines, encoding="utf-8")
    read_end, write_end = os.pipe()
    with subprocess.Popen(
        [sys.executable, "-m", "lionfactory", "call", "reader", "action=read", "path=big.txt"],
        cwd=workspace,
        stdout=write_end,
        stderr=subprocess.PIPE,
    ) as proc:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as head:
            first = head.readline()  # what `head -1` reads before it exits
        _, errors = proc.communicate(timeout=60)
    assert first.startswith(b"1\t000000 x")
    assert b"Traceback" not in errors and b"BrokenPipe" not in errors, errors
    assert proc.returncode == 141


def test_the_served_process_freezes_what_it_built_before_serving(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import gc

    from lionfactory._cli import _serving

    before = gc.get_freeze_count()
    try:
        _serving("stdio")
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    assert capsys.readouterr().err == "lionfactory: serving MCP at stdio\n"


_COLLECTOR_PROBE = """
import gc, sys
import lionfactory._cli as cli
from lionfactory.__main__ import main

serving = cli._serving
def probe(url, **kwargs):
    loading = gc.isenabled()
    serving(url, **kwargs)
    print("loading", loading, "serving", gc.isenabled(), file=sys.stderr, flush=True)
cli._serving = probe
listing = cli._list_tools
def listed(*args, **kwargs):
    print("tools", gc.isenabled(), file=sys.stderr, flush=True)
    return listing(*args, **kwargs)
cli._list_tools = listed
sys.argv[0] = "lionfactory"
main()
"""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["mcp", "serve", "--tools", "reader"], "loading False serving True"),
        (["tools"], "tools True"),
    ],
)
def test_the_program_pauses_the_collector_only_while_it_loads(
    tmp_path: Path, command: list[str], said: str
) -> None:
    # Loading a server sets off a hundred collections that free nothing; the
    # collector runs again once the server is ready, and for any other command
    # before it starts.
    proc = subprocess.run(
        [sys.executable, "-c", _COLLECTOR_PROBE, *command, "--workspace", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said in proc.stderr, proc.stderr


def test_main_called_by_a_program_leaves_its_collector_alone(tmp_path: Path) -> None:
    import gc

    from lionfactory._cli import main

    gc.disable()
    try:
        assert main(["tools", "--workspace", str(tmp_path)]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
