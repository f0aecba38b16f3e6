"""Helpers several test modules share: mechanisms as parameters, polling, processes, git.

Importable from any test module: pytest puts this folder (the one holding
``conftest.py``) on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import queue
import socketserver
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest
import trio

from lionfactory import Branch
from lionfactory._os.isolation import mechanism_problem


def mechanism_params() -> list[Any]:
    """``bwrap`` and ``landlock``, each skipped (with the reason) where it cannot work."""
    params = []
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        skip = pytest.mark.skipif(problem is not None, reason=f"{name}: {problem}")
        params.append(pytest.param(name, marks=skip))
    return params


async def eventually(predicate: Callable[[], bool], seconds: float) -> None:
    """Poll `predicate` (another process's state, which no event reports) until it holds."""
    with trio.fail_after(seconds):
        for _ in itertools.count():
            if predicate():
                return
            await trio.sleep(0.01)


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[str]:
    """Serve `server` (an HTTP server bound to a loopback port) from a thread; yield its URL.

    It polls for shutdown every 50 ms (the standard library's half second
    would be paid by every test at teardown); the thread is joined after.
    """
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def kept_folder(name: str) -> Iterator[Path]:
    """A folder kept across test runs (what the tests install with npm), held by this run.

    Under ``$XDG_CACHE_HOME`` (else ``~/.cache``)/lionfactory-tests, so an
    install is paid once per machine, not once per run (pytest's own cache
    is gone under ``-p no:cacheprovider``). An exclusive lock on it while
    held: two runs at once never install into one folder together.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(base) / "lionfactory-tests" / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder


def drained(stream: IO[bytes], name: str) -> tuple[queue.Queue[bytes], threading.Thread]:
    """A thread reading `stream` line by line (its pipe never fills); the lines, ``b""`` at EOF."""
    lines: queue.Queue[bytes] = queue.Queue()

    def drain() -> None:
        for line in stream:
            lines.put(line)
        lines.put(b"")

    thread = threading.Thread(target=drain, daemon=True, name=name)
    thread.start()
    return lines, thread


def stopped(process: subprocess.Popen[bytes]) -> None:
    """Terminate `process` and reap it; killed if it is still there after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def open_descriptors() -> set[tuple[str, str]]:
    """This process's open descriptors, each as (number, what it is open on).

    Compared as sets, not counted: a finalizer may close a descriptor of an
    earlier test at any moment (a standalone tool's supervisor is closed when
    the tool is collected), and a count then drops by one while nothing
    leaked. What a leak leaves is a pair that was not there before: a pipe
    or socket names its own inode, so a new one never matches an old one.
    """
    pairs = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
            pairs.add((name, os.readlink(f"/proc/self/fd/{name}")))
    return pairs


def opened_since(before: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The descriptors open now that were not open (on the same thing) in `before`."""
    return open_descriptors() - before


def processes_tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose argv holds `tag`: seen from the host, any namespace."""

    def tagged(pid: str) -> bool:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return tag.encode() in cmdline.read()

    return _live_processes(tagged)


def processes_in(folder: Path) -> list[int]:
    """Live (non-zombie) processes whose working directory is `folder` or beneath it, any namespace.

    What a test's own processes share when their argv cannot be tagged (a
    snapshot's git, a sandbox's bwrap): each test's temporary folder is its own.
    """
    return _live_processes(lambda pid: Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder))


def _live_processes(chosen: Callable[[str], bool]) -> list[int]:
    """The live (non-zombie) processes `chosen` picks by ``/proc`` number (gone ones: skipped)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if not chosen(name):
                continue
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        if data[data.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def git(cwd: Path | str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run the test's own git in `cwd` (it must succeed) and return what it printed.

    `env`, when given, is the whole environment git runs in (the test's own
    otherwise). A failure shows git's own message, not only its exit status.
    """
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"git {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def home_git(root: Path, *args: str) -> str:
    """`git` with ``home`` beside `root` as HOME: the developer's ~/.gitconfig stays out.

    For the tests that write their own global configuration there.
    """
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent / "home")}
    return git(root, *args, env=env)


def hermetic_git(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, identity: bool = False
) -> None:
    """No global or system git configuration leaks in, and no sandbox is left in /tmp.

    With `identity`, commits get a fixed author and committer (a machine with
    no git identity configured can commit too).
    """
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    if identity:
        for who in ("AUTHOR", "COMMITTER"):
            monkeypatch.setenv(f"GIT_{who}_NAME", "Test")
            monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.com")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))


def ids_passed_to(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[str]:
    """Replace `owner.name`, a function of one record, by one that also notes the record's id.

    Returns the list the ids are appended to, call by call: what a test
    counts to show which records were estimated or measured again.
    """
    ids: list[str] = []
    original = getattr(owner, name)

    def noting(record: Any) -> Any:
        ids.append(record.id)
        return original(record)

    monkeypatch.setattr(owner, name, noting)
    return ids


def sandbox_branch(
    tmp_path: Path, isolation: str, files: Mapping[str, str], **options: Any
) -> tuple[Branch, Path]:
    """A coding-toolkit branch with bash and sandbox on a new repository committing `files`.

    Names in `files` starting with ``.env`` are written but left untracked.
    """
    from lionfactory.coding import coding_toolkit

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        (repo / name).write_text(text)
    tracked = [name for name in files if not name.startswith(".env")]
    git(repo, "add", *tracked)
    git(repo, "-c", "user.name=Setup", "-c", "user.email=setup@example.com", "commit", "-qm", "i")
    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=repo,
        tools=["bash", "sandbox"],
        isolation=isolation,
        notify=False,
        **options,
    )
    return branch, repo


async def act(branch: Branch, tool: str, **arguments: Any) -> dict[str, Any]:
    """`branch.act`'s result for a call that must succeed as a call."""
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    out: dict[str, Any] = result.result
    return out
