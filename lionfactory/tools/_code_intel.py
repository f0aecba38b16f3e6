"""Semantic code intelligence on a language server (Astral's ``ty server``), per branch.

`CodeIntel` holds the servers of one workspace: one per branch (the id of the
branch running the call), started on first use and closed by
``close_branch(branch_id)``, which `Branch.aclose` calls. A server runs under
the workspace's process isolation, narrowed: it may write nothing but its
private temporary directory (its cache lives there), it has no network, and
it gets the environment the isolation's policy allows.

Warming: `warm` starts the process and writes ``initialize`` into its pipe
without waiting (a fresh pipe holds the few hundred bytes), so the server
indexes the workspace while the caller does other work; the answer is read
by the first call that needs the server. No task is left running: the
server is an operating-system process owned by the branch, not a task.

Diagnostics after an edit (`EditDiagnostics`, the editor's ``diagnostics=``
option) are a delta: the errors before the edit are carried through the
edit's own line diff and compared with the errors after it as multisets, so
a line inserted above an old error does not report it again.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import difflib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import anyio
import anyio.to_thread
import attrs

from lionfactory._call import current_call
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation, server_isolation, workspace_isolation
from lionfactory._os.regular import FileRefused, is_directory, is_regular, read_regular
from lionfactory._os.workspace import PathRefused, Workspace, starts_like_private_key
from lionfactory.tools._editor_files import WrittenFile
from lionfactory.tools._lsp import LspClient, LspError, char_column

__all__ = [
    "EDIT_WAIT_SECONDS",
    "CodeIntel",
    "ConfigRefused",
    "Diagnostic",
    "EditDiagnostics",
    "ENGINES",
    "build_code_intel",
    "engine_command",
    "ty_command",
    "while_checking",
]

EDIT_WAIT_SECONDS = 1.5
"""The longest an edit waits for the server's diagnostics of the new text."""

_WHILE_CHECKING: contextvars.ContextVar[Callable[[], Awaitable[None]] | None] = (
    contextvars.ContextVar("lionfactory_while_checking", default=None)
)


@contextlib.contextmanager
def while_checking(work: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """Have an edit made inside run `work` while its diagnostics are checked, if it waits for any.

    `EditDiagnostics.after` awaits `work()` once the new text is sent, before
    it waits for the server's answer: the server checks in a process of its
    own (milliseconds), so what the event loop does meanwhile adds nothing
    to the call. `work` may not run at all (not a Python file, no server, a
    failed change): the caller runs it afterwards then, so it must be safe to
    call again once it has run.
    """
    token = _WHILE_CHECKING.set(work)
    try:
        yield
    finally:
        _WHILE_CHECKING.reset(token)


MAX_PER_FILE = 20
MAX_OTHER_FILES = 5
MAX_WATCHED = 10
"""Other open files asked again after an edit (the ones used last)."""
_INIT_TIMEOUT = 10.0
_REQUEST_TIMEOUT = 10.0
_MAX_SYNC_BYTES = 5_000_000
_SEVERITY = {1: "error", 2: "warning", 3: "information", 4: "hint"}


ENGINES: dict[str, tuple[str, str]] = {"ty": ("ty", "server"), "pyrefly": ("pyrefly", "lsp")}
"""Each engine's program and the argument that makes it a language server, in preference order.

ty first: it answers first diagnostics and edits fastest and in the least
memory; pyrefly (Meta, MIT) is the fallback where ty is not installed.
"""


def engine_command(engine: str) -> tuple[str, ...] | None:
    """`engine`'s server argv; None when it is not installed.

    The program is looked up in the running interpreter's environment first
    (where the ``code`` extra puts it), then on ``PATH``.
    """
    program, argument = ENGINES[engine]
    here = Path(sys.executable).parent / program
    if here.is_file() and os.access(here, os.X_OK):
        return (str(here), argument)
    found = shutil.which(program)
    return (found, argument) if found else None


def ty_command() -> tuple[str, ...] | None:
    """``ty server`` from the running interpreter's environment, else ``PATH``; None without ty."""
    return engine_command("ty")


CONFIG_FILES = ("ty.toml", "pyproject.toml", ".venv/pyvenv.cfg")
"""The files at the workspace root that ty reads as it starts and reloads when they change."""
_MAX_CONFIG_BYTES = 4_000_000


class ConfigRefused(LspError):
    """ty is not started: a configuration file it reads is not a plain file (no retry helps)."""


def config_problem(root: Path) -> str | None:
    """Why ty must not be started on `root`, or None.

    A confined command can put a FIFO, a link to ``/dev/zero`` or a
    gigabyte file where ty reads its configuration: ty then blocks on it
    (or reads without end), and every request times out as if a retry
    could help. Each such file must be a regular file (links followed, as
    ty follows them) of a sane size; a folder of that name ty skips, so it
    passes.
    """
    for name in CONFIG_FILES:
        try:
            st = os.stat(root / name)
        except OSError:
            continue  # absent (or unreachable): ty skips it as well
        if is_directory(st):
            continue  # ty reads no folder as a file: it skips it
        if not is_regular(st):
            return (
                f"{name} in the workspace is not a regular file (a FIFO, a device or a "
                f"socket), and ty would block reading it; replace it with a regular file "
                f"or remove it"
            )
        if st.st_size > _MAX_CONFIG_BYTES:
            return (
                f"{name} in the workspace is {st.st_size:,} bytes, too large for a "
                f"configuration file; shrink it or remove it"
            )
    return None


def path_uri(path: Path) -> str:
    """The ``file://`` URI of absolute `path`."""
    return "file://" + quote(str(path))


def uri_path(uri: str) -> Path | None:
    """The path of a ``file://`` URI, or None for another scheme."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


@attrs.frozen
class Diagnostic:
    """One diagnostic in the reader's numbering (1-based line and character column)."""

    path: str
    line: int
    column: int
    code: str
    message: str
    severity: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape the editor and ``code_nav`` return."""
        return attrs.asdict(self)


def _diagnostic(shown: str, lines: list[str], raw: dict[str, Any]) -> Diagnostic | None:
    try:
        start = raw["range"]["start"]
        line0, unit = int(start["line"]), int(start["character"])
    except (KeyError, TypeError, ValueError):
        return None
    text = lines[line0] if 0 <= line0 < len(lines) else ""
    code = raw.get("code")
    severity = raw.get("severity")
    return Diagnostic(
        path=shown,
        line=line0 + 1,
        column=char_column(text, unit) + 1,
        code=str(code) if code is not None else "",
        message=str(raw.get("message", ""))[:1000],
        severity=_SEVERITY.get(severity, "error") if isinstance(severity, int) else "error",
    )


@attrs.define(eq=False)
class _Doc:
    version: int
    text: str
    stamp: tuple[int, int] | None
    _split: tuple[str, list[str]] | None = None

    def lines(self) -> list[str]:
        """`text` split into lines, once per text (read only: the list is shared).

        An edit's text after it is the next edit's text before it; splitting
        a 600-line file again cost a twentieth of a millisecond each time.
        """
        if self._split is None or self._split[0] is not self.text:
            self._split = (self.text, self.text.splitlines())
        return self._split[1]


@attrs.define(eq=False)
class Server:
    """One running language server and the documents it has been sent."""

    popen: subprocess.Popen[bytes]
    client: LspClient
    root: Path
    cache: Path | None
    graceful: bool
    init_id: int = attrs.field(
        init=False, default=attrs.Factory(lambda self: self.client.next_id(), takes_self=True)
    )
    """The id of the ``initialize`` request: `initialize` sends it, `started` waits for it."""
    ready: bool = False
    pulls: bool = False
    """The server answers ``textDocument/diagnostic`` (diagnostics on request)."""
    docs: dict[str, _Doc] = attrs.field(factory=dict)
    _finalizer: Any = None

    @property
    def pid(self) -> int:
        """The process id of the server (or of its isolation wrapper)."""
        return self.popen.pid

    def initialize(self) -> None:
        """Send the ``initialize`` request; `started` waits for its answer.

        A write that fails (the server already exited, or its pipe is full)
        is not raised here: `started` then reports that no answer came.
        """
        uri = path_uri(self.root)
        with contextlib.suppress(LspError):
            self.client.write_now(
                {
                    "jsonrpc": "2.0",
                    "id": self.init_id,
                    "method": "initialize",
                    "params": {
                        "processId": os.getpid(),
                        "rootUri": uri,
                        "workspaceFolders": [{"uri": uri, "name": self.root.name or "root"}],
                        "capabilities": {
                            "general": {"positionEncodings": ["utf-16"]},
                            "textDocument": {
                                "publishDiagnostics": {"versionSupport": True},
                                "hover": {"contentFormat": ["plaintext", "markdown"]},
                            },
                        },
                        "clientInfo": {"name": "lionfactory"},
                    },
                }
            )

    async def started(self, timeout: float = _INIT_TIMEOUT) -> None:
        """Wait for the answer to ``initialize``, then say ``initialized``.

        Raises:
            LspError: no answer within the start timeout, or the server exited.
        """
        if self.ready:
            return
        result = await self.client.response(self.init_id, timeout=timeout, method="initialize")
        capabilities = result.get("capabilities") if isinstance(result, dict) else None
        self.pulls = isinstance(capabilities, dict) and bool(capabilities.get("diagnosticProvider"))
        await self.client.notify("initialized", {})
        self.ready = True

    async def pull(self, uri: str, *, timeout: float) -> list[dict[str, Any]] | None:
        """Ask for the current diagnostics of open document `uri` (None: no answer in time).

        A server pushes diagnostics for the document that changed, but not
        always for the documents that import it; asking is how an edit learns
        it broke a caller in another open file.
        """
        doc = self.docs.get(uri)
        if doc is None or not self.pulls:
            return None
        try:
            result = await self.client.request(
                "textDocument/diagnostic", {"textDocument": {"uri": uri}}, timeout=timeout
            )
        except LspError:
            return None
        if not isinstance(result, dict):
            return None
        if result.get("kind") == "unchanged":
            return self.current(uri, doc.version)
        items = result.get("items")
        if not isinstance(items, list):
            return None
        found = [d for d in items if isinstance(d, dict)]
        self.client.record(uri, doc.version, found)
        return found

    async def sync(self, path: Path, text: str, stamp: tuple[int, int] | None) -> tuple[str, int]:
        """Send `text` as the content of `path` (open or change); its (uri, version)."""
        uri = path_uri(path)
        doc = self.docs.get(uri)
        if doc is None:
            self.docs[uri] = _Doc(1, text, stamp)
            await self.client.notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": uri,
                        "languageId": "python",
                        "version": 1,
                        "text": text,
                    }
                },
            )
            return uri, 1
        if doc.text != text:
            doc.version += 1
            doc.text = text
            await self.client.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": doc.version},
                    "contentChanges": [{"text": text}],
                },
            )
        doc.stamp = stamp
        return uri, doc.version

    def current(self, uri: str, version: int) -> list[dict[str, Any]] | None:
        """The diagnostics published for `uri` at `version` (or unversioned), if any yet."""
        published = self.client.published.get(uri)
        if published is None:
            return None
        if published.version is not None and published.version != version:
            return None
        return published.diagnostics

    async def aclose(self) -> None:
        """Ask the server to shut down, then end its process group and wait for it."""
        with anyio.CancelScope(shield=True):
            if self.popen.poll() is None and self.client.gone is None and self.ready:
                with contextlib.suppress(LspError), anyio.move_on_after(0.5):
                    await self.client.request("shutdown", None, timeout=0.5)
                    await self.client.notify("exit", None)
            _kill(self.popen, self.graceful)
            with contextlib.suppress(subprocess.TimeoutExpired):
                await anyio.to_thread.run_sync(self.popen.wait, 2.0)
            await _group_gone(self.popen.pid)
            for fd in (self.client.write_fd, self.client.read_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if self.cache is not None:
                await anyio.to_thread.run_sync(shutil.rmtree, self.cache, True)
            if self._finalizer is not None:
                self._finalizer.detach()


def _kill(popen: subprocess.Popen[bytes], graceful: bool) -> None:
    if graceful and popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(popen.pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)


async def _group_gone(pgid: int) -> None:
    from lionfactory._os.process import _wait_group_gone

    await _wait_group_gone(pgid, zombies_count=False)


def _reap(popen: subprocess.Popen[bytes]) -> None:
    """Finalizer: a server whose owner forgot `aclose` dies with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        popen.wait(timeout=1)


def _read_text(
    workspace: Workspace, path: Path, strict: bool = False
) -> tuple[str, tuple[int, int]] | None:
    """The text of `path` and its (mtime, size) stamp; None when absent, binary or too big.

    Read through the workspace seam (no link out of the root, no protected
    name, no private key), like every other read a tool makes for the model.

    Raises:
        PathRefused: with `strict`, the workspace refuses the path (its message
            says why); otherwise that is None too.
    """
    try:
        data, st = read_regular(workspace.locate(str(path)), _MAX_SYNC_BYTES)
    except PathRefused:
        if strict:
            raise
        return None
    except (OSError, FileRefused):
        return None
    try:
        return data.decode("utf-8"), (st.st_mtime_ns, st.st_size)
    except UnicodeDecodeError:
        return None


def _written_text(
    workspace: Workspace, path: Path, data: bytes, st: os.stat_result
) -> tuple[str, tuple[int, int]] | None:
    """What `_read_text` would give for `path` holding `data` (stat `st`), without reading it.

    A file that is no longer the one written (another inode, size or mtime:
    an appender's late tail the editor carried over, another program's
    write) is read after all; otherwise `_known_text`.
    """
    try:
        now = os.stat(path)
    except OSError:
        return _read_text(workspace, path)
    if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
        return _read_text(workspace, path)
    return _known_text(workspace, path, data, st)


def _known_text(
    workspace: Workspace, path: Path, data: bytes, st: os.stat_result | None
) -> tuple[str, tuple[int, int]] | None:
    """`data`, the content of `path` the editor read or wrote, as `_read_text` would give it.

    The same refusals: a path the workspace refuses, content over the sync
    cap, a private key, text that is not UTF-8.
    """
    try:
        workspace.locate(str(path))
    except PathRefused:
        return None
    if st is None or len(data) > _MAX_SYNC_BYTES or starts_like_private_key(data):
        return None
    try:
        return data.decode("utf-8"), (st.st_mtime_ns, st.st_size)
    except UnicodeDecodeError:
        return None


@attrs.define(eq=False)
class _Pending:
    """An edit whose diagnostics had not arrived when the edit returned."""

    server: Server
    files: list[_FileDelta]


@attrs.define(eq=False)
class _FileDelta:
    path: Path
    shown: str
    uri: str
    version: int
    old_lines: list[str] | None
    new_lines: list[str]
    before: list[dict[str, Any]]
    other: bool = False
    """Not changed by the edit: an open file that may depend on one that was."""
    after: list[dict[str, Any]] | None = None


@attrs.define(eq=False)
class CodeIntel:
    """The language servers of one workspace, one per branch, started lazily.

    Attributes:
        workspace: the workspace (its root is the server's; files are read through it).
        command: the server's argv (`ty_command`), or a test server's.
        isolation: how the server is confined (None: run it directly).
        engine: the engine's name in responses.
        errors_only: report only errors (not warnings) after edits.
    """

    workspace: Workspace
    command: tuple[str, ...]
    isolation: Isolation | None = None
    engine: str = "ty"
    errors_only: bool = True
    init_timeout: float = _INIT_TIMEOUT
    _servers: dict[Any, Server] = attrs.field(factory=dict)
    _pending: dict[Any, list[_Pending]] = attrs.field(factory=dict)
    _starting: dict[Any, anyio.Lock] = attrs.field(factory=dict)

    @property
    def root(self) -> Path:
        """The workspace root."""
        return self.workspace.root

    @staticmethod
    def key() -> Any:
        """The branch the current call runs for (None outside a branch)."""
        call = current_call()
        return call.branch_id if call is not None else None

    def shown(self, path: Path) -> str:
        """`path` as the workspace shows it (relative to the root when inside)."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    # -- lifecycle ---------------------------------------------------------------

    def warm(self, key: Any = None) -> None:
        """Start the server for `key` (default: the current branch) without waiting for it."""
        key = self.key() if key is None else key
        server = self._servers.get(key)
        # A running server first: the toolkit warms at every Python call, and
        # the configuration check (a `stat` per file ty reads) is `server`'s
        # to make before each use; here it only keeps a new one from starting.
        if server is not None and server.popen.poll() is None and server.client.gone is None:
            return
        if config_problem(self.root) is not None:
            return  # `server` says why
        self._servers[key] = self._launch()

    def _launch(self) -> Server:
        argv = list(self.command)
        env: dict[str, str] | None = None
        cwd = self.root
        pass_fds: tuple[int, ...] = ()
        graceful = False
        cache: Path | None = None
        if self.isolation is not None:
            filtered = self.isolation.environment(None)
            env = dict(filtered.variables) if filtered is not None else None
            if self.isolation.wraps:
                confined = server_isolation(self.isolation, self.root, Path(argv[0]))
                launch = confined.launch(argv, cwd=cwd, env=env)
                argv, env, pass_fds = list(launch.argv), dict(launch.env or {}), launch.pass_fds
                graceful, cache = launch.graceful, launch.tmpdir
        env = dict(os.environ if env is None else env)
        if "TMPDIR" in env and cache is None and self.isolation is not None:
            env["XDG_CACHE_HOME"] = env["TMPDIR"] + "/lionfactory-ty-cache"
        else:
            if cache is None:
                cache = Path(tempfile.mkdtemp(prefix="lionfactory-ty-"))
            env["XDG_CACHE_HOME"] = str(cache)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            popen = subprocess.Popen(
                argv,
                stdin=in_r,
                stdout=out_w,
                stderr=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        except OSError as exc:
            for fd in (in_w, out_r):
                os.close(fd)
            raise LspError(f"cannot start {self.engine} ({exc.strerror or exc})") from None
        finally:
            for fd in (in_r, out_w, *pass_fds):
                os.close(fd)
        os.set_blocking(in_w, False)
        os.set_blocking(out_r, False)
        client = LspClient(write_fd=in_w, read_fd=out_r)
        server = Server(popen=popen, client=client, root=self.root, cache=cache, graceful=graceful)
        server._finalizer = weakref.finalize(server, _reap, popen)
        server.initialize()
        return server

    async def server(self) -> Server:
        """The running, initialised server of the current branch (started if needed).

        Raises:
            LspError: it could not start or does not answer ``initialize``, or
                a configuration file it would read is not a plain file
                (`config_problem`).
        """
        key = self.key()
        ready = self.ready_server(key)
        if ready is not None:
            return ready
        lock = self._starting.setdefault(key, anyio.Lock())
        async with lock:
            problem = config_problem(self.root)
            if problem is not None:
                # A server already running may be blocked on it (ty reloads a
                # changed configuration): it goes, and none starts until fixed.
                stale = self._servers.pop(key, None)
                if stale is not None:
                    await stale.aclose()
                raise ConfigRefused(problem)
            server = self._servers.get(key)
            if server is not None and (server.popen.poll() is not None or server.client.gone):
                # Crashed: reap it and start over once.
                self._servers.pop(key, None)
                await server.aclose()
                server = None
            if server is None:
                self.warm(key)
                server = self._servers[key]
            try:
                await server.started(self.init_timeout)
            except LspError:
                self._servers.pop(key, None)
                await server.aclose()
                raise
            return server

    def ready_server(self, key: Any = None) -> Server | None:
        """The running, initialised server of `key` (default: the current branch), or None.

        None also when the workspace's configuration is refused or a start is
        under way: `server` then starts, waits or refuses. Otherwise this is
        what `server` returns at once, without its start lock
        (nothing starts) or a cancel scope: the editor asks at every Python
        edit, and each of those cost tens of microseconds of event-loop work.
        """
        key = self.key() if key is None else key
        server = self._servers.get(key)
        lock = self._starting.get(key)
        if (
            server is None
            or not server.ready
            or (lock is not None and lock.locked())
            or server.popen.poll() is not None
            or server.client.gone is not None
            or config_problem(self.root) is not None
        ):
            return None
        return server

    async def close_branch(self, branch_id: Any) -> None:
        """Shut down the server of branch `branch_id` (nothing of it keeps running)."""
        self._pending.pop(branch_id, None)
        server = self._servers.pop(branch_id, None)
        if server is not None:
            await server.aclose()

    async def aclose(self) -> None:
        """Shut down every server."""
        for key in list(self._servers):
            await self.close_branch(key)

    def pids(self) -> list[int]:
        """The process ids of the running servers (for tests and diagnostics)."""
        return [s.pid for s in self._servers.values() if s.popen.poll() is None]

    # -- documents -------------------------------------------------------------

    async def open(
        self, server: Server, path: Path, *, strict: bool = False
    ) -> tuple[str, int, list[str]] | None:
        """Bring `path`'s disk content to the server; (uri, version, lines), None if unreadable.

        Raises:
            PathRefused: with `strict`, the workspace refuses the path.
        """
        read = await anyio.to_thread.run_sync(_read_text, self.workspace, path, strict)
        return await self.send(server, path, read)

    async def send(
        self, server: Server, path: Path, read: tuple[str, tuple[int, int]] | None
    ) -> tuple[str, int, list[str]] | None:
        """Bring `read`, what `_read_text` found at `path`, to the server; as `open` returns."""
        if read is None:
            return None
        text, stamp = read
        uri, version = await server.sync(path, text, stamp)
        return uri, version, server.docs[uri].lines()

    async def refresh(self, server: Server) -> None:
        """Send again every open document whose file changed on disk since it was sent."""
        for uri, doc in list(server.docs.items()):
            path = uri_path(uri)
            if path is None:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if doc.stamp != (st.st_mtime_ns, st.st_size):
                await self.open(server, path)

    async def diagnostics(
        self, server: Server, path: Path, *, timeout: float
    ) -> tuple[list[Diagnostic], bool]:
        """The current diagnostics of `path` and whether they match its current text."""
        opened = await self.open(server, path)
        if opened is None:
            return [], True
        uri, version, lines = opened
        fresh = await server.client.pump(
            lambda: server.current(uri, version) is not None, timeout=timeout
        )
        raw = server.current(uri, version) or []
        shown = self.shown(path)
        found = [d for r in raw if (d := _diagnostic(shown, lines, r)) is not None]
        return sorted(found, key=lambda d: (d.line, d.column)), fresh

    # -- edits -------------------------------------------------------------------

    def editing(self) -> EditDiagnostics:
        """The editor's ``diagnostics=`` hook bound to this engine."""
        return EditDiagnostics(self)

    async def late_report(self) -> dict[str, Any] | None:
        """Diagnostics of earlier edits that arrived after those edits returned, once."""
        key = self.key()
        pending = self._pending.get(key)
        if not pending:
            return None
        await pending[0].server.client.poll()
        done: list[_Pending] = []
        waiting: list[_Pending] = []
        for item in pending:
            ready = all(item.server.current(f.uri, f.version) is not None for f in item.files)
            (done if ready else waiting).append(item)
        self._pending[key] = waiting
        if not done:
            return None
        reports = [self._delta(item.server, item.files, fresh=True, waited=0) for item in done]
        return reports[-1] if len(reports) == 1 else _merge(reports)

    def _delta(
        self,
        server: Server,
        files: list[_FileDelta],
        *,
        fresh: bool,
        waited: int,
        olds: Mapping[str, tuple[list[Diagnostic], _LineMap]] | None = None,
    ) -> dict[str, Any]:
        """The delta of `files`; `olds`: `_old_errors` of the edited ones by URI, if known."""
        introduced: list[Diagnostic] = []
        resolved: list[Diagnostic] = []
        remaining: list[Diagnostic] = []
        for f in files:
            raw_now = f.after if f.other else server.current(f.uri, f.version)
            if raw_now is None and f.other:
                continue  # not asked in time: nothing known about it
            now = self._wanted(f.shown, f.new_lines, raw_now or [])
            known = olds.get(f.uri) if olds is not None and not f.other else None
            old, mapping = known if known is not None else self._old_errors(f)
            new_in, gone = _compare(old, now, f.old_lines, f.new_lines, mapping)
            introduced += new_in
            resolved += gone
            if not f.other:
                remaining += now
        return _capped(
            {
                "introduced": introduced,
                "resolved": resolved,
                "remaining": remaining,
            },
            engine=self.engine,
            fresh=fresh,
            waited=waited,
            first=[f.shown for f in files if not f.other],
        )

    def _old_errors(self, f: _FileDelta) -> tuple[list[Diagnostic], _LineMap]:
        """`f`'s errors before the change, and the map of its lines through the change."""
        old = self._wanted(f.shown, f.old_lines or [], f.before)
        mapping = _LineMap.of(f.old_lines, f.new_lines) if f.old_lines is not None else _NO_LINES
        return old, mapping

    def _wanted(self, shown: str, lines: list[str], raw: list[dict[str, Any]]) -> list[Diagnostic]:
        found = [d for r in raw if (d := _diagnostic(shown, lines, r)) is not None]
        if self.errors_only:
            found = [d for d in found if d.severity == "error"]
        return sorted(found, key=lambda d: (d.line, d.column))


def _merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    merged = dict(reports[-1])
    for name in ("introduced", "resolved"):
        merged[name] = [d for r in reports for d in r[name]]
    return merged


@attrs.frozen
class _LineMap:
    """Old 1-based line -> new 1-based line, for the lines the edit left unchanged.

    The lines before and after the changed region map to themselves (shifted
    by the edit's length change), worked out per line asked; only the region
    between is diffed. An edit touches a few lines of a long file, and a
    full `difflib` pass over 600 lines cost more (about 2 ms) than the rest
    of the delta together; so did building the whole table of a 600-line
    file (about 1 ms) when only the lines with an old error are looked up.
    """

    head: int
    tail: int
    old_count: int
    new_count: int
    middle: dict[int, int]

    @classmethod
    def of(cls, old: list[str], new: list[str]) -> _LineMap:
        limit = min(len(old), len(new))
        head = _common(old, new, limit, lambda seq, a, b: seq[a:b])
        tail = _common(old, new, limit - head, lambda seq, a, b: seq[len(seq) - b : len(seq) - a])
        matcher = difflib.SequenceMatcher(
            None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False
        )
        middle = {
            head + block.a + i + 1: head + block.b + i + 1
            for block in matcher.get_matching_blocks()
            for i in range(block.size)
        }
        return cls(head, tail, len(old), len(new), middle)

    def get(self, line: int) -> int | None:
        """Where old `line` is in the new text; None when the edit changed or removed it."""
        if 1 <= line <= self.head:
            return line
        if self.old_count - self.tail < line <= self.old_count:
            return line - self.old_count + self.new_count
        return self.middle.get(line)


def _common(
    old: list[str], new: list[str], limit: int, part: Callable[[list[str], int, int], list[str]]
) -> int:
    """How many of the first `limit` lines of `part` agree in `old` and `new`.

    `part(seq, a, b)` is lines ``a`` to ``b`` counted from the end compared
    (a slice). A binary search over slices compares the lines in C; a loop
    over 600 lines one by one cost a tenth of a millisecond per edit.
    """
    same, high = 0, limit
    while same < high:
        middle = (same + high + 1) // 2
        if part(old, same, middle) == part(new, same, middle):
            same = middle
        else:
            high = middle - 1
    return same


def _line_map(old: list[str], new: list[str]) -> dict[int, int]:
    """Old 1-based line -> new 1-based line, for the lines the edit left unchanged (`_LineMap`)."""
    mapping = _LineMap.of(old, new)
    return {
        line: found for line in range(1, len(old) + 1) if (found := mapping.get(line)) is not None
    }


_NO_LINES = _LineMap(0, 0, 0, 0, {})
"""The map of a file that did not exist before the edit: no old line survives."""


def _compare(
    old: list[Diagnostic],
    now: list[Diagnostic],
    old_lines: list[str] | None,
    new_lines: list[str],
    mapping: _LineMap | None = None,
) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(introduced, resolved): `now` against `old` carried through the edit's line diff.

    First an exact multiset match on (mapped line, code, message); then the
    old errors whose lines the edit changed or that moved are matched by
    (code, message) alone, so a reformatted or moved line keeps its error.
    `mapping` is that diff's `_LineMap`, when the caller has it already.
    """
    if mapping is None:
        mapping = _LineMap.of(old_lines, new_lines) if old_lines is not None else _NO_LINES
    exact: collections.Counter[tuple[int | None, str, str]] = collections.Counter(
        (mapping.get(d.line), d.code, d.message) for d in old
    )
    leftover_new: list[Diagnostic] = []
    for d in now:
        key: tuple[int | None, str, str] = (d.line, d.code, d.message)
        if exact[key] > 0:
            exact[key] -= 1
        else:
            leftover_new.append(d)
    # What is left in `exact` are the old errors no new one matched exactly.
    unmatched_old: list[Diagnostic] = []
    for d in old:
        mapped = (mapping.get(d.line), d.code, d.message)
        if exact[mapped] > 0:
            exact[mapped] -= 1
            unmatched_old.append(d)
    loose = collections.Counter((d.code, d.message) for d in unmatched_old)
    introduced: list[Diagnostic] = []
    for d in leftover_new:
        if loose[(d.code, d.message)] > 0:
            loose[(d.code, d.message)] -= 1
        else:
            introduced.append(d)
    resolved: list[Diagnostic] = []
    for d in unmatched_old:
        if loose[(d.code, d.message)] > 0:
            loose[(d.code, d.message)] -= 1
            resolved.append(d)
    return introduced, resolved


def _capped(
    groups: dict[str, list[Diagnostic]],
    *,
    engine: str,
    fresh: bool,
    waited: int,
    first: Iterable[str],
) -> dict[str, Any]:
    """At most `MAX_PER_FILE` per file and `MAX_OTHER_FILES` files beyond the edited ones."""
    edited = list(dict.fromkeys(first))
    out: dict[str, Any] = {}
    omitted: dict[str, int] = {}
    for name, items in groups.items():
        by_file: dict[str, list[Diagnostic]] = {}
        for d in items:
            by_file.setdefault(d.path, []).append(d)
        order = [p for p in edited if p in by_file] + [p for p in by_file if p not in edited]
        allowed = set(edited) | set([p for p in order if p not in edited][:MAX_OTHER_FILES])
        kept: list[dict[str, Any]] = []
        left = 0
        for path in order:
            rows = by_file[path]
            if path not in allowed:
                left += len(rows)
                continue
            kept += [d.as_dict() for d in rows[:MAX_PER_FILE]]
            left += max(0, len(rows) - MAX_PER_FILE)
        out[name] = kept
        if left:
            omitted[name] = left
    out.update(engine=engine, fresh=fresh, waited_ms=waited)
    if omitted:
        out["omitted"] = omitted
    return out


@attrs.define(eq=False)
class _Before:
    server: Server | None
    files: list[_FileDelta]
    started: float
    starting: bool = False
    """The server did not start within the edit's budget (it is still starting)."""
    edited: list[Path] = attrs.field(factory=list)
    """The Python files the change touches, whose text before it `prepare` reads."""
    read: dict[Path, tuple[str, tuple[int, int]] | None] | None = None
    """The edited files as `EditDiagnostics.prepare` read them (None: it did not run)."""
    settled: dict[Path, tuple[str, tuple[int, int]] | None] | None = None
    """The changed files as `EditDiagnostics.settle` read them (None: `after` reads them)."""


@attrs.frozen
class EditDiagnostics:
    """The editor's ``diagnostics=`` hook: the errors an edit introduced and resolved.

    `before` runs before the change with the files it will touch, `after`
    once it succeeded. A server that cannot start makes both return None:
    an edit never fails because of its diagnostics. The files themselves
    are read in the editor's worker thread, which runs the change anyway:
    `prepare` reads the old text there just before the change, `settle` the
    new text just after it, so that neither `before` nor `after` pays for a
    thread round trip of its own (a worker's wake-up, then the event loop's:
    on a loaded machine, more than the read).
    """

    intel: CodeIntel

    async def before(self, paths: Iterable[Path]) -> _Before | None:
        """The server for the Python files among `paths`; a token for `prepare` and `after`.

        The files are not read here: the editor's `prepare` reads them.
        """
        python = [p for p in dict.fromkeys(paths) if p.suffix in (".py", ".pyi")]
        if not python:
            return None
        started = time.monotonic()
        server = self.intel.ready_server()
        if server is not None:
            return _Before(server, [], started, edited=python)
        try:
            # A server still starting gets the edit's budget, no more; it goes
            # on starting for the next call.
            with anyio.move_on_after(EDIT_WAIT_SECONDS):
                server = await self.intel.server()
        except LspError:
            return _Before(None, [], started)
        if server is None:
            return _Before(None, [], started, starting=True)
        return _Before(server, [], started, edited=python)

    def prepare(self, token: _Before | None) -> None:
        """Read the files of `token` before the change (blocking: in the editor's thread)."""
        if token is None or token.server is None:
            return
        token.read = {path: _read_text(self.intel.workspace, path) for path in token.edited}

    async def _old(self, token: _Before, server: Server) -> list[_FileDelta]:
        """The edited files' errors before the change, then the other open files'.

        The text `prepare` read is what the server gets first (usually the
        text it already has, which it has checked), so the errors before the
        change are those of the text the change started from.
        """
        assert token.read is not None
        deadline = token.started + EDIT_WAIT_SECONDS
        files: list[_FileDelta] = []
        for path in token.edited:
            shown = self.intel.shown(path)
            opened = await self.intel.send(server, path, token.read.get(path))
            if opened is None:
                # A new file: nothing was wrong in it before.
                files.append(_FileDelta(path, shown, path_uri(path), 0, None, [], []))
                continue
            uri, version, lines = opened
            await server.client.pump(
                lambda u=uri, v=version: server.current(u, v) is not None,  # type: ignore[misc]
                timeout=max(0.0, deadline - time.monotonic()),
            )
            files.append(
                _FileDelta(path, shown, uri, version, lines, [], server.current(uri, version) or [])
            )
        return files + self._others(server, files)

    def _others(self, server: Server, edited: list[_FileDelta]) -> list[_FileDelta]:
        """The other open documents (the latest `MAX_WATCHED`) with what is known of them."""
        if not server.pulls:
            return []
        skip = {f.uri for f in edited}
        others = []
        for uri, doc in list(server.docs.items())[::-1]:
            known = server.current(uri, doc.version)
            path = uri_path(uri)
            if uri in skip or known is None or path is None:
                continue
            lines = doc.lines()
            shown = self.intel.shown(path)
            others.append(
                _FileDelta(path, shown, uri, doc.version, lines, lines, known, other=True)
            )
            if len(others) == MAX_WATCHED:
                break
        return others

    def settle(self, token: _Before | None) -> None:
        """Read the files of `token` as the change left them (blocking: in the editor's thread).

        The editor's worker thread is already running when its change
        succeeds; a read there replaces the one `after` would make in a
        thread of its own, whose round trip (a worker's wake-up, then the
        event loop's) on a loaded machine costs more than the read.
        """
        self.settle_written(token, {})

    def settle_written(self, token: _Before | None, written: Mapping[Path, WrittenFile]) -> None:
        """`settle`, taking each file the editor reports in `written` as it wrote it.

        The bytes pass the same refusals a read would (`_written_text`); a
        file missing from `written` (a patch's) is read. An edit, which the
        editor ran without `prepare`, gives the text before it as well.
        """
        if token is None or token.server is None:
            return
        workspace = self.intel.workspace
        if token.read is None:
            olds = [(p, known) for p in token.edited if (known := written.get(p)) is not None]
            if len(olds) < len(token.edited) or any(k.old is None for _, k in olds):
                return  # the text before the change is unknown: `after` says nothing
            token.read = {
                path: _known_text(workspace, path, known.old, known.old_st)
                for path, known in olds
                if known.old is not None
            }
        token.settled = {
            path: _read_text(workspace, path)
            if (known := written.get(path)) is None
            else _written_text(workspace, path, known.data, known.st)
            for path in token.edited
        }

    async def after(self, token: _Before | None) -> dict[str, Any] | None:
        """The diagnostics delta of the edit `before` saw coming (None: not Python, no engine)."""
        if token is None:
            return None
        if token.server is None:
            if not token.starting:
                return None  # the engine cannot run here; the edit stands on its own
            return _capped(
                {"introduced": [], "resolved": [], "remaining": []},
                engine=self.intel.engine,
                fresh=False,
                waited=round((time.monotonic() - token.started) * 1000),
                first=[],
            )
        server = token.server
        if token.read is None:
            return None  # `prepare` never ran: the text before the change is unknown
        deadline = token.started + EDIT_WAIT_SECONDS
        files: list[_FileDelta] = []
        try:
            token.files = await self._old(token, server)
            for f in token.files:
                if f.other:
                    files.append(f)
                    continue
                if token.settled is not None and f.path in token.settled:
                    opened = await self.intel.send(server, f.path, token.settled[f.path])
                else:
                    opened = await self.intel.open(server, f.path)
                if opened is None:
                    continue  # deleted by the edit (or no longer text)
                uri, version, lines = opened
                files.append(attrs.evolve(f, uri=uri, version=version, new_lines=lines))
            edited = [f for f in files if not f.other]
            work = _WHILE_CHECKING.get()
            if work is not None:
                await work()
            # The errors before the change need only the old text and the
            # new: worked out while the server checks, not after its answer.
            olds = {f.uri: self.intel._old_errors(f) for f in edited}
            fresh = await server.client.pump(
                lambda: all(server.current(f.uri, f.version) is not None for f in edited),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if fresh:
                for f in files:
                    left = deadline - time.monotonic()
                    if f.other and left > 0:
                        f.after = await server.pull(f.uri, timeout=left)
        except LspError:
            return None
        waited = round((time.monotonic() - token.started) * 1000)
        if not fresh and server.client.gone is not None:
            return None  # the server died; the next call starts another
        if not fresh:
            self.intel._pending.setdefault(self.intel.key(), []).append(_Pending(server, edited))
            return _capped(
                {"introduced": [], "resolved": [], "remaining": []},
                engine=self.intel.engine,
                fresh=False,
                waited=waited,
                first=[],
            )
        return self.intel._delta(server, files, fresh=True, waited=waited, olds=olds)


def build_code_intel(
    workspace: Workspace,
    *,
    isolation: str | Isolation = "none",
    env_policy: EnvPolicy | None = None,
    command: Sequence[str] | None = None,
    engine: str | None = None,
) -> CodeIntel | None:
    """The language-server pool of `workspace`; None when no engine is installed.

    Args:
        workspace: the workspace the servers serve.
        isolation: how they are confined (narrowed: see `CodeIntel`).
        env_policy: the environment they get.
        command: the server's argv (a test server), named `engine` or ``"ty"``.
        engine: ``"ty"`` or ``"pyrefly"`` only; None: the first installed of `ENGINES`.

    Raises:
        ConfigurationError: the requested isolation cannot work here.
        ValueError: an unknown engine.
    """
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    name, argv = engine or "ty", tuple(command) if command is not None else None
    if argv is None:
        for candidate in [engine] if engine else list(ENGINES):
            argv = engine_command(candidate)
            if argv is not None:
                name = candidate
                break
    if argv is None:
        return None
    confinement = workspace_isolation(
        isolation, workspace.root, network="none", env_policy=env_policy
    )
    return CodeIntel(workspace, argv, confinement, engine=name)
