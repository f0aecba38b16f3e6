"""Serve tools over MCP with one `Branch` per client session.

The factories are called per session, so everything a factory keeps per
branch (the coding toolkit's read-before-edit evidence, its sandbox slot, its
nudge counters) belongs to one client and never leaks to another. Every call
goes through `Branch.act`, so the evidence lands on that session's tool
messages, where the toolkit's guard looks for it.

What a "session" is depends on the transport:

* **stdio** (and an in-process client): the stream is one client, so one
  branch serves the whole connection, in every protocol version (a
  2026-07-28 client over stdio keeps its evidence as a session does).
  `serve_mcp` serves stdio with lionfactory's own JSON-RPC loop
  (`lionfactory.mcp._stdio`), which speaks both eras and never imports the
  SDK: a client that spawns the server waits for Python, pydantic and the
  served tools, not for the SDK's import. The SDK's server
  (`create_mcp_server`) serves both eras on any stream pair; its registry
  lives in the low-level server's lifespan, which ``Server.run`` enters once
  per connection.
* **Streamable HTTP**: several clients share one process. A session is the
  ``Mcp-Session-Id`` of the 2025 handshake era; its branch is made on the
  session's first tool call and dropped after `session_idle_timeout` without
  calls (the SDK's session manager forgets the id after the same idle time).
  The 2026-07-28 protocol has no sessions at all: ``server/discover``
  advertises it, and each of its tool calls runs on a branch made for that
  call alone (`lionfactory.mcp._stateless`), so no client ever sees another's
  evidence and any replica behind a load balancer can answer any call. The
  read-before-edit guard then sees no earlier read, and an edit of an
  existing file needs an ``expected_hash`` matching the file's current
  content (the ``content_hash`` the reader returned).

What a session id grants is its branch, read-before-edit evidence
included, so: a 2026-07-28 request never runs on a session, whatever
``Mcp-Session-Id`` it carries; at most `max_sessions` session branches
live at once (one more closes the least recently used idle one with
`Branch.aclose`, and over HTTP the SDK refuses openings past the bound); a
session its client DELETEd is closed at once and, with a store, stored as
closed so no server resumes it; and a request whose ``Origin`` is not the
served origin (or one of `allowed_origins`) is refused, another port of
the same loopback host included.

A request that carries a progress token (``_meta.progressToken``) gets a
``notifications/progress`` every half second while its call runs (the
elapsed seconds), so clients that reset their timeout on progress never
time out a long command.

Results: a tool's response is sent as its JSON text plus, for protocol
versions that have it (2025-06-18 on), ``structuredContent``; tools carry a
``title``, ``annotations`` and an ``outputSchema`` (`lionfactory.mcp._hints`,
`lionfactory.mcp._protocol`); ``isError`` is set when the response reports a typed
failure (`Tool.reports_failure`). Invalid arguments (`ToolInputError`),
a denial and an unexpected exception also come back as ``isError`` results
whose text is what `Branch.act` shows a model, without ``structuredContent``
(``{error, error_type, errors}`` would not match the tool's ``outputSchema``,
and clients that validate it, the TypeScript SDK's, would throw) and with
``error_type`` and the validation ``errors`` in ``_meta``: the MCP specification asks
servers to report input validation errors as tool execution errors so that
the model can correct its call, and the SDK's own ``MCPServer`` does the
same. An unknown tool name is a protocol error (``INVALID_PARAMS``).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import anyio
import attrs

from lionfactory import ActionResult, Branch
from lionfactory.errors import ConfigurationError
from lionfactory.mcp._approvals import Elicit, ask_person, client_elicitation
from lionfactory.mcp._budget import DEFAULT_MEMORY_BUDGET, SessionMemory, SessionStatus
from lionfactory.mcp._protocol import ServedTools, call_result, unknown_tool_message
from lionfactory.mcp._stateless import (
    LISTING_TTL_MS,
    MODERN_VERSIONS,
    StatelessCalls,
    is_modern,
    progress_token,
    run_with_progress,
)

if TYPE_CHECKING:
    import os

    from mcp import types
    from mcp.server.lowlevel import Server

    from lionfactory.backends import BranchStore
    from lionfactory.mcp._resources import WorkspaceResources
    from lionfactory.mcp._stdio import Handshake
    from lionfactory.mcp._stored_sessions import StoredSessions

    # The workspace whose files are served as MCP resources (see create_mcp_server).
    Resources: TypeAlias = str | os.PathLike[str] | WorkspaceResources | None

__all__ = [
    "SessionBranches",
    "SessionStatus",
    "check_serve_options",
    "create_mcp_server",
    "serve_mcp",
]

Factory = Callable[..., Any]
Source = Branch | Factory | Sequence[Factory | tuple[Factory, Mapping[str, Any]]]
"""What `serve_mcp` serves: a template Branch, a factory, or factories with keyword arguments."""

SESSION_HEADER = "mcp-session-id"
DEFAULT_IDLE_TIMEOUT = 30 * 60.0
"""Seconds without calls after which an HTTP session's branch is dropped (the SDK's default)."""

DEFAULT_MAX_SESSIONS = 1000
"""Live sessions a server keeps; past it the least recently used idle one is closed.

Each session's branch holds its conversation (up to the memory budget) and
whatever its tools started; a bound keeps a client that opens session after
session from growing the server without end.
"""

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _as_branch_maker(source: Source) -> Callable[[], Branch]:
    """Normalise what the caller serves into "make a fresh branch for one session"."""
    if isinstance(source, Branch):
        template = source
        # clone() calls every factory again: per-branch state is rebuilt, and
        # a static tool bound to the template raises CloneError at startup.
        return template.clone
    entries: list[tuple[Factory, Mapping[str, Any]]] = []
    items = [source] if callable(source) else source
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(
            f"serve a Branch, a factory, or a list of factories / (factory, kwargs) pairs, "
            f"got {source!r:.200}"
        )
    for item in items:
        if callable(item):
            entries.append((item, {}))
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and callable(item[0])
            and isinstance(item[1], Mapping)
        ):
            entries.append((item[0], item[1]))
        else:
            raise TypeError(f"each entry must be a factory or (factory, kwargs), got {item!r:.200}")
    if not entries:
        raise ValueError("nothing to serve: the list of factories is empty")

    def make() -> Branch:
        branch = Branch(name="mcp-session")
        for factory, kwargs in entries:
            branch.register(factory, **kwargs)
        return branch

    return make


@attrs.define(eq=False)
class _Session:
    branch: Branch
    last_used: float
    active: int = 0
    memory: SessionMemory = attrs.field(factory=SessionMemory)


@attrs.define(eq=False)
class SessionBranches:
    """The branches of the sessions one server is serving, by session key.

    Args:
        new_branch: makes the branch of a new session.
        idle_timeout: seconds without calls after which a session's branch
            is dropped, or None to keep branches for the registry's life.
        clock: a monotonic clock (injectable for tests).
        memory_budget: characters of message text a session's branch may
            hold before its oldest tool results are compacted (their
            metadata, and so the guard's evidence, is kept), or None for no
            limit. See `lionfactory.mcp._budget`.
        max_sessions: live sessions kept; making one more closes the least
            recently used session that runs no call (`Branch.aclose`, so
            its jobs and processes end) and drops it. None for no bound.
    """

    new_branch: Callable[[], Branch]
    idle_timeout: float | None = None
    clock: Callable[[], float] = time.monotonic
    memory_budget: int | None = DEFAULT_MEMORY_BUDGET
    max_sessions: int | None = DEFAULT_MAX_SESSIONS
    _sessions: dict[str, _Session] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        _check_max_sessions(self.max_sessions)

    async def admit(self, key: str) -> None:
        """Make room for session `key` before its call: close idle and least recently used ones.

        A session that runs a call is never closed under it; when every
        session does, the bound is passed for as long as they run.
        """
        now = self.clock()
        dropped = self._evict_idle(now)
        if (
            key not in self._sessions
            and self.max_sessions is not None
            and len(self._sessions) >= self.max_sessions
        ):
            idle = [(s.last_used, k) for k, s in self._sessions.items() if s.active == 0]
            for _, victim in sorted(idle)[: len(self._sessions) - self.max_sessions + 1]:
                dropped.append(self._sessions.pop(victim).branch)
        for branch in dropped:
            await branch.aclose()

    async def drop(self, key: str) -> None:
        """Forget session `key` (its client ended it) and close what its branch holds."""
        session = self._sessions.pop(key, None)
        if session is not None:
            await session.branch.aclose()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def get(self, key: str) -> Branch | None:
        """The branch session `key` has now, without making one."""
        session = self._sessions.get(key)
        return None if session is None else session.branch

    def adopt(self, key: str, branch: Branch) -> None:
        """Serve session `key` with `branch` from now on (a branch loaded from a store).

        A call already running keeps the branch it started with; the new
        branch's memory is counted from scratch on its first call.
        """
        session = self._sessions.get(key)
        if session is None:
            self._sessions[key] = _Session(branch=branch, last_used=self.clock())
        else:
            session.branch = branch
            session.memory.reset()

    @contextmanager
    def use(self, key: str) -> Iterator[Branch]:
        """The branch of session `key` (made on first use) for the duration of one call."""
        now = self.clock()
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(branch=self.new_branch(), last_used=now)
        session.active += 1
        try:
            yield session.branch
        finally:
            session.active -= 1
            session.last_used = self.clock()
            # Bounded after every call, also while other calls of the session
            # run: a client that always keeps one call in flight is bounded too.
            session.memory.after_call(session.branch, self.memory_budget)

    def status(self, key: str) -> SessionStatus | None:
        """What session `key` holds, or None for an unknown session."""
        session = self._sessions.get(key)
        if session is None:
            return None
        return session.memory.status(session.branch, self.memory_budget)

    def _evict_idle(self, now: float) -> list[Branch]:
        """Drop the sessions idle for longer than the timeout; their branches, to close."""
        if self.idle_timeout is None:
            return []
        dropped = []
        for key, session in list(self._sessions.items()):
            if session.active == 0 and now - session.last_used > self.idle_timeout:
                dropped.append(self._sessions.pop(key).branch)
        return dropped


def _check_max_sessions(max_sessions: int | None) -> None:
    if max_sessions is not None and (
        isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1
    ):
        raise ValueError(
            f"max_sessions must be a positive number of sessions or None, got {max_sessions!r}"
        )


def _call_session(ctx: Any, tool: str, names: frozenset[str]) -> str | None:
    """The session a tool call belongs to, or None for a stateless call; refuses an unknown tool.

    Raises:
        MCPError: ``INVALID_PARAMS`` for an unknown tool (a protocol error:
            the client asked for something the listing never offered).
    """
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    if tool not in names:
        raise MCPError(INVALID_PARAMS, unknown_tool_message(tool, names))
    return _session_key(ctx)


def _session_key(ctx: Any) -> str | None:
    """The session key: the HTTP session id, "" on a stream transport, None if sessionless.

    A 2026-07-28 request over HTTP has no session (`lionfactory.mcp._stateless`);
    on a stream (stdio, in process) the stream is one client in every era.
    """
    request = ctx.request
    if request is None:
        return ""
    if is_modern(ctx.params) or ctx.protocol_version in MODERN_VERSIONS:
        # Sessionless means sessionless: an Mcp-Session-Id on a 2026-07-28
        # request (a live session's, a deleted one's, a made-up one) would
        # run the call on that session's branch, with its evidence.
        return None
    headers = getattr(request, "headers", None)
    value = headers.get(SESSION_HEADER) if headers is not None else None
    return value or None


def _progress_report(ctx: Any) -> Callable[[float, str], Awaitable[None]] | None:
    """How to report a call's progress, when its request asked for it (a progress token)."""
    if progress_token(ctx.params or {}) is None:
        return None

    async def report(progress: float, message: str) -> None:
        await ctx.session.report_progress(progress, None, message)

    return report


def _to_call_result(action: ActionResult, version: str | None) -> types.CallToolResult:
    from mcp import types

    return types.CallToolResult.model_validate(call_result(action, version))


def _prepare(
    source: Source, memory_budget: int | None
) -> tuple[Callable[[], Branch], ServedTools, Branch]:
    """How to make a session's branch, the served tools (described once per process), the probe.

    One branch (the probe) is made at once, to list the tools and to fail
    early on a broken factory. Over HTTP it is not used for calls; over
    stdio it becomes the connection's branch (`_first_then`).

    Raises:
        ValueError: `memory_budget` is below 1, or a ``subagent`` tool on
            branches without a chat model.
    """
    _check_memory_budget(memory_budget)
    new_branch = _as_branch_maker(source)
    probe = new_branch()
    if "subagent" in probe.tools and probe.chat_model is None:
        # Advertising it would make every call fail with "no chat model".
        raise ValueError(
            "the subagent tool needs a chat model, and the session branches have none: serve "
            "a template Branch(chat_model=...) with the tools registered on it"
        )
    return new_branch, ServedTools.of(probe.tools.values()), probe


def _check_memory_budget(memory_budget: int | None) -> None:
    if memory_budget is not None and memory_budget < 1:
        raise ValueError(
            f"session_memory_budget must be a positive number of characters or None, "
            f"got {memory_budget!r}"
        )


def _first_then(first: Branch, new_branch: Callable[[], Branch]) -> Callable[[], Branch]:
    """A maker that hands out `first` once, then makes branches with `new_branch`.

    A stdio server has one session: building the probe's twin for it on the
    first call made every served toolkit twice (its tools, its isolation,
    its models), for a branch nobody else had used.
    """
    pending = [first]

    def make() -> Branch:
        return pending.pop() if pending else new_branch()

    return make


def create_mcp_server(
    source: Source,
    *,
    name: str = "lionfactory",
    instructions: str | None = None,
    session_idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    session_memory_budget: int | None = DEFAULT_MEMORY_BUDGET,
    store: BranchStore | None = None,
    store_resources: Mapping[str, Any] | None = None,
    stream_session: str | None = None,
    resources: Resources = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
) -> Server[SessionBranches]:
    """Build a low-level MCP server that gives each client session its own Branch.

    One branch is made at once, to list the tools and to fail early on a
    broken factory; it is not used for calls. Run the server with
    `serve_mcp`, or yourself: ``await server.run(read, write,
    server.create_initialization_options())`` on a stream pair, or
    ``server.streamable_http_app()`` under an ASGI server.

    Args:
        source: a template `Branch` (each session gets ``template.clone()``),
            a factory, or a list of factories and ``(factory, kwargs)`` pairs
            (each session gets a new Branch with them registered).
        name: the server name clients see.
        instructions: text the server gives clients at connection.
        session_idle_timeout: seconds without calls after which an HTTP
            session's branch is dropped; None keeps them until shutdown.
        session_memory_budget: characters of message text a session keeps
            before its oldest tool results are compacted (evidence kept);
            None for no limit (see `SessionBranches`).
        store: where session branches survive the server: each session's
            branch is saved after every tool call and loaded again when the
            session comes back (after a restart, or on another server
            sharing the store).
        store_resources: the live objects the served factories take, by
            keyword name, to rebuild a loaded branch (see `Branch.from_dict`).
        stream_session: the name a stdio connection's session is stored
            under (a stream has no session id): a restarted stdio server
            with the same store and name resumes it. None (the default)
            picks a random name per server start, so servers sharing a
            store never share a stream session by accident. Stream and
            HTTP sessions are stored apart: no name on one reaches a session
            of the other.
        resources: serve the files of this workspace (a path, or a
            `WorkspaceResources`) as MCP resources: listed through the
            project's ignore rules, read beneath the root; None serves none.
        max_sessions: live session branches kept; one more closes the least
            recently used idle one (see `SessionBranches`). None for no bound.

    Raises:
        TypeError: `source` is none of the above.
        ValueError: `session_memory_budget` or `max_sessions` is below 1, or a ``subagent``
            tool on branches without a chat model.
        ImportError: the ``mcp`` extra is not installed.
        Exception: whatever a factory raises for its arguments (for example
            `ValueError` for an unknown coding tool name), at once.
    """
    try:
        from mcp import types
        from mcp.server.caching import CacheHint
        from mcp.server.lowlevel import Server
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("this needs the MCP Python SDK: pip install 'lionfactory[mcp]'") from exc

    _check_max_sessions(max_sessions)
    new_branch, served, probe = _prepare(source, session_memory_budget)
    stored = _stored_sessions(store, new_branch, store_resources, stream_session, probe)
    names = served.names
    listings: dict[str | None, types.ListToolsResult] = {}

    @asynccontextmanager
    async def lifespan(server: Server[SessionBranches]) -> AsyncIterator[SessionBranches]:
        sessions = SessionBranches(
            new_branch,
            idle_timeout=session_idle_timeout,
            memory_budget=session_memory_budget,
            max_sessions=max_sessions,
        )
        _LIVE[server] = sessions
        try:
            yield sessions
        finally:
            _LIVE.pop(server, None)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        version = ctx.protocol_version
        found = listings.get(version)
        if found is None:
            found = listings[version] = types.ListToolsResult.model_validate(
                {"tools": served.listing(version)}
            )
        return found

    stateless = StatelessCalls(new_branch)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        key = _call_session(ctx, params.name, names)
        sessions: SessionBranches = ctx.lifespan_context
        arguments = params.arguments or {}
        report = _progress_report(ctx)
        if key is None:
            # Its kept output comes embedded: the call's branch is closed with it.
            call = await run_with_progress(report, partial(stateless.call, params.name, arguments))
            return types.CallToolResult.model_validate(call.result(ctx.protocol_version))
        elicit = client_elicitation(ctx)
        work = partial(_act, sessions, stored, key, params.name, arguments, elicit)
        action = await run_with_progress(report, work)
        return _to_call_result(action, ctx.protocol_version)

    # Cacheable in 2026-07-28 (handshake-era results drop the fields): the
    # listing is fixed for the process's life and holds no user data.
    listing_hint = CacheHint(ttl_ms=LISTING_TTL_MS, scope="public")
    server: Server[SessionBranches] = Server(
        name,
        version=_version(),
        instructions=instructions,
        cache_hints={"tools/list": listing_hint, "server/discover": listing_hint},
        # A 2026-07-28 call's Mcp-Param headers are checked against the tool's
        # input schema; without this lookup the SDK runs the whole tools/list
        # handler (and its result's validation) on every call to find it.
        get_tool_input_schema=served.input_schema,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

    if stored is not None:
        from lionfactory.mcp._stored_sessions import attach

        attach(server, stored)
    _attach_resources(server, resources)
    return server


_LIVE: weakref.WeakKeyDictionary[Any, SessionBranches] = weakref.WeakKeyDictionary()
"""The session branches of each running server (its lifespan's), for `_ending_sessions`."""


def _ending_sessions(app: Any, server: Server[SessionBranches], store_kept: bool) -> Any:
    """Wrap a Streamable HTTP app so a session its client DELETEd is gone for good.

    Its branch is closed and dropped at once (not after the idle timeout),
    and with a store it is stored as closed, so no server, this one after a
    restart included, resumes its id.
    """
    from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

    header = MCP_SESSION_ID_HEADER.lower().encode("latin-1")

    async def ending(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            await app(scope, receive, send)
            return
        session = next((v.decode("latin-1") for k, v in scope["headers"] if k == header), None)

        async def watch(message: Any) -> None:
            # Before the response leaves: a client that saw its DELETE
            # succeed never finds the session alive, even if the server
            # stops right after.
            if message["type"] == "http.response.start" and message["status"] < 300 and session:
                await end(session)
            await send(message)

        await app(scope, receive, watch)

    async def end(session: str) -> None:
        sessions = _LIVE.get(server)
        if sessions is not None:
            await sessions.drop(session)
        if store_kept:
            # Imported only with a store: a server without one never loads the backends.
            from lionfactory.mcp._stored_sessions import attached

            stored = attached(server)
            if stored is not None:
                await stored.close(session)

    return ending


def _workspace_resources(resources: Resources) -> WorkspaceResources | None:
    if resources is None:
        return None
    from lionfactory.mcp._resources import WorkspaceResources

    return (
        resources if isinstance(resources, WorkspaceResources) else WorkspaceResources.at(resources)
    )


def _attach_resources(server: Server[SessionBranches], resources: Resources) -> None:
    served = _workspace_resources(resources)
    if served is not None:
        from lionfactory.mcp._resources import attach_resources

        attach_resources(server, served)


def _stored_sessions(
    store: BranchStore | None,
    new_branch: Callable[[], Branch],
    resources: Mapping[str, Any] | None,
    stream_session: str | None,
    probe: Branch,
) -> StoredSessions | None:
    if store is None:
        return None
    # Imported only with a store: a server without one never loads the backends.
    from lionfactory.mcp._stored_sessions import StoredSessions

    _register_served_factories(probe)
    return StoredSessions(store, new_branch, dict(resources or {}), stream_session)


def _register_served_factories(probe: Branch) -> None:
    """Let stored sessions name the factories this server was handed.

    A stored session is rebuilt through `Branch.from_dict`, which calls only
    registered factories (a store is data other programs may write). The
    application handed these factories to the server itself, so it trusts
    them; registering them here is what it would otherwise have to do by hand.

    Raises:
        ConfigurationError: a factory has no stable import path (a lambda, a
            local function, a partial), so a stored session could not name it.
    """
    from lionfactory._registration import FACTORIES

    for registration in probe.registrations:
        factory = registration.factory
        if factory is None or FACTORIES.name_of(factory) is not None:
            continue
        try:
            FACTORIES.register(factory)
        except ValueError as exc:
            raise ConfigurationError(
                f"sessions kept in a store must name their factories: {exc}"
            ) from None


async def _act(
    sessions: SessionBranches,
    stored: StoredSessions | None,
    key: str,
    tool: str,
    arguments: Mapping[str, Any],
    elicit: Elicit | None = None,
) -> ActionResult:
    """Run one call on session `key`'s branch; with a store, resume it first and save it after.

    The save comes after the session's memory bound has been applied (when
    `SessionBranches.use` ends), so the store keeps what the session keeps.
    A call a hook held for approval is put to the person through `elicit`
    (the client's ``elicitation/create``) when the client can be asked;
    otherwise the session keeps it pending and the result says so.
    """
    await sessions.admit(key)
    if stored is not None:
        await stored.resume(sessions, key)
    with sessions.use(key) as branch:
        action = await branch.act(tool, arguments)
        action = await ask_person(branch, action, elicit)
    if stored is not None:
        await stored.save(key, branch)
    return action


def _version() -> str:
    from lionfactory import __version__

    return __version__


def check_serve_options(transport: str, host: str, port: int) -> None:
    """Refuse an unknown transport, a non-loopback host or a bad port (see `serve_mcp`).

    Raises:
        ValueError: naming the bad value.
    """
    if transport not in ("stdio", "http"):
        raise ValueError(f"transport must be 'stdio' or 'http', got {transport!r}")
    if host not in _LOOPBACK:
        raise ValueError(
            f"host must be a loopback address ({', '.join(_LOOPBACK)}): the tools run commands "
            f"and edit files and the server has no authentication; got {host!r}"
        )
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in 0-65535, got {port!r}")


def serve_mcp(
    source: Source,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "lionfactory",
    instructions: str | None = None,
    session_idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    session_memory_budget: int | None = DEFAULT_MEMORY_BUDGET,
    on_ready: Callable[[str], object] | None = None,
    store: BranchStore | None = None,
    store_resources: Mapping[str, Any] | None = None,
    stream_session: str | None = None,
    resources: Resources = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    allowed_origins: Sequence[str] = (),
    handshake: Handshake | None = None,
) -> None:
    """Serve tools over MCP until the client disconnects (stdio) or the process is stopped.

    Each client session gets its own Branch built from `source` (see
    `create_mcp_server`). stdio runs on trio; HTTP runs uvicorn, which needs
    asyncio, so that transport runs on anyio's asyncio backend. Called in
    the main thread of a program that left SIGTERM to its default action,
    either transport returns on SIGTERM once its calls are cancelled and its
    sessions closed, so the program's exit hooks still run; a handler the
    program installed itself gets the signal instead (HTTP: after uvicorn's
    orderly shutdown).

    Args:
        source: a template Branch, a factory, or factories with kwargs.
        transport: ``"stdio"`` or ``"http"`` (Streamable HTTP at ``/mcp``).
        host: a loopback address: the tools run commands and edit files and
            the server has no authentication, so nothing else is accepted.
        port: the HTTP port; 0 picks a free one (`on_ready` gets the URL).
        name: the server name clients see.
        instructions: text the server gives clients at connection.
        session_idle_timeout: see `create_mcp_server`.
        session_memory_budget: see `create_mcp_server`.
        on_ready: called with ``"stdio"`` or the server's URL once it accepts
            connections.
        store: keep session branches in this store, so sessions survive a
            restart and servers sharing it can serve one session (see
            `create_mcp_server`); over HTTP a stored session id unknown to
            this process is resumed instead of refused.
        store_resources: see `create_mcp_server`.
        stream_session: see `create_mcp_server`.
        resources: see `create_mcp_server`.
        max_sessions: see `create_mcp_server`; over HTTP it also bounds the
            SDK's open sessions (one more is refused with 503 until one
            ends or expires).
        allowed_origins: HTTP only: browser origins (``"http://host:port"``)
            allowed besides the served one. A request whose ``Origin`` is
            on neither is refused (403), another port of the same loopback
            host included: a page served there must not drive the tools.
        handshake: stdio only: what
            `lionfactory.mcp._stdio.answer_initialize` read from stdin (and
            maybe answered) while the program loaded.

    Raises:
        ValueError: an unknown transport, a non-loopback host, a bad port, a
            memory budget or session bound below 1, a malformed origin, a
            `handshake` with HTTP or one that answered for another server.
    """
    check_serve_options(transport, host, port)
    _check_max_sessions(max_sessions)
    origins = _check_origins(allowed_origins)
    if handshake is not None and transport != "stdio":
        raise ValueError(f"a handshake read from stdin is for stdio, not {transport!r}")
    if transport == "stdio":
        _check_memory_budget(session_memory_budget)
        anyio.run(
            partial(
                _serve_stdio,
                source,
                session_memory_budget,
                max_sessions,
                store,
                store_resources,
                stream_session,
                name,
                instructions,
                on_ready,
                resources,
                handshake,
            ),
            backend="trio",
        )
        return
    server = create_mcp_server(
        source,
        name=name,
        instructions=instructions,
        session_idle_timeout=session_idle_timeout,
        session_memory_budget=session_memory_budget,
        store=store,
        store_resources=store_resources,
        stream_session=stream_session,
        resources=resources,
        max_sessions=max_sessions,
    )
    anyio.run(
        _serve_http,
        server,
        host,
        port,
        session_idle_timeout,
        on_ready,
        store is not None,
        max_sessions,
        origins,
        backend="asyncio",
    )


def _check_origins(origins: Sequence[str]) -> tuple[str, ...]:
    """The allowed origins as given, each ``scheme://host[:port]``; else `ValueError`."""
    if isinstance(origins, str):
        raise ValueError(f"allowed_origins is a list of origins, got the string {origins!r}")
    checked = []
    for origin in origins:
        scheme, sep, rest = origin.partition("://") if isinstance(origin, str) else ("", "", "")
        if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
            raise ValueError(
                f"an allowed origin is scheme://host[:port] (no path), got {origin!r:.200}"
            )
        checked.append(origin)
    return tuple(checked)


def _transport_security(host: str, port: int, origins: Sequence[str]) -> Any:
    """Host and Origin checks: loopback host names, and the served origin or `origins`.

    The SDK's own default for a loopback host allows every origin port
    (``http://localhost:*``), so a page from any local web server (a dev
    server on port 3000, a notebook) could call the tools; here only the
    origin being served, under each loopback name, is allowed. The Host
    header keeps any port (what DNS rebinding changes is the name, and a
    balancer in front of several replicas forwards one port to another).
    """
    from mcp.server.transport_security import TransportSecuritySettings

    names = ["127.0.0.1", "localhost", "[::1]"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:{port}" for name in names] + list(origins),
    )


async def _serve_stdio(
    source: Source,
    memory_budget: int | None,
    max_sessions: int | None,
    store: BranchStore | None,
    store_resources: Mapping[str, Any] | None,
    stream_session: str | None,
    name: str,
    instructions: str | None,
    on_ready: Callable[[str], object] | None,
    served_resources: Resources,
    handshake: Handshake | None = None,
) -> None:
    """Build the served tools, then serve them on stdin and stdout.

    The tools are built here, on the running event loop, after every module
    the loop and the transport need is loaded, and before the first request
    is read (a broken factory fails before the handshake, unless a command
    line answered it early: `handshake`). Building them is the last work
    before ``initialize`` is answered (or, answered early, before the next
    request is read) because it starts background work (a confined shell's
    first walk of the toolchain trees, seconds of CPU in a daemon thread):
    the imports of trio and of the transport, done after the build, shared
    the interpreter with that walk and took three to four times as long
    (about 0.2 s of start-up on a busy 2-core machine).
    """
    # lionfactory's own stdio server: it never imports the SDK (see _stdio).
    from lionfactory.mcp._stdio import serve_stdio

    new_branch, served, probe = _prepare(source, memory_budget)
    # The stream is one client: the probe is its branch.
    sessions = SessionBranches(
        _first_then(probe, new_branch), memory_budget=memory_budget, max_sessions=max_sessions
    )
    stored = _stored_sessions(store, new_branch, store_resources, stream_session, probe)
    resources = _workspace_resources(served_resources)

    async def act(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        return await _act(sessions, stored, "", tool, arguments)

    await serve_stdio(
        served,
        act,
        name=name,
        version=_version(),
        instructions=instructions,
        on_ready=on_ready,
        resources=resources,
        handshake=handshake,
    )


async def _serve_http(
    server: Server[SessionBranches],
    host: str,
    port: int,
    session_idle_timeout: float | None,
    on_ready: Callable[[str], object] | None,
    stored_sessions: bool = False,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    origins: Sequence[str] = (),
) -> None:
    import uvicorn

    from lionfactory.mcp._events import (
        RETRY_MILLISECONDS,
        BoundedEventStore,
        prime_every_stream,
        send_stored_json,
    )

    prime_every_stream()
    send_stored_json()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Bind and listen before announcing the URL: connections made after
    # on_ready wait in the backlog until uvicorn accepts them, so a caller
    # may connect as soon as it reads the URL (and port 0 works).
    sock = socket.create_server((host, port), family=family)
    # Accepted connections inherit these. Without TCP_NODELAY a response
    # written in two parts (head, then body: the 2026-07-28 path does so)
    # waited for the client's delayed ACK, about 40 ms per request; uvicorn
    # sets it on sockets it binds itself, not on sockets handed to it.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    bound = sock.getsockname()[1]
    # Resumable streams: a priming event and a retry field open every SSE
    # stream, and a dropped client gets what it missed (see _events). The
    # app is made once the port is known: its Origin check names it.
    app: Any = server.streamable_http_app(
        host=host,
        session_idle_timeout=session_idle_timeout,
        event_store=BoundedEventStore(),
        retry_interval=RETRY_MILLISECONDS,
        max_sessions=max_sessions,
        transport_security=_transport_security(host, bound, origins),
    )
    if stored_sessions:
        from lionfactory.mcp._stored_sessions import adopt_stored_sessions

        app = adopt_stored_sessions(app, server)
    app = _ending_sessions(app, server, stored_sessions)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    config = uvicorn.Config(app, log_level="warning", ws="none", lifespan="on")
    served = uvicorn.Server(config)
    with sock, _sigterm_ends(served):
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}/mcp")
        await served.serve(sockets=[sock])


@contextmanager
def _sigterm_ends(served: Any) -> Iterator[None]:
    """While `served` (a ``uvicorn.Server``) runs, SIGTERM ends it in order; the process lives on.

    uvicorn shuts down gracefully on SIGTERM (calls in flight are cancelled,
    sessions closed), then puts back the handler it found and raises the
    signal again, so that the process dies of it. With the default handler
    that killed ``python -m lionfactory`` before its exit hooks ran, and
    what they end went on without the server: a first snapshot's git, a
    job started outside a supervisor. Found handling SIGTERM itself, uvicorn
    raises it into `served`'s own handler, which only asks an ended server
    to end; `serve` returns and the command ends as stdio's does on SIGTERM:
    hooks run, status 0. Installed before `serve` starts, the same handler
    also ends a server that gets SIGTERM before uvicorn installs its own.
    A handler the program installed itself is left alone: uvicorn raises
    the signal into it, as the program asked. Signals reach only the main
    thread: elsewhere uvicorn handles none.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, served.handle_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
