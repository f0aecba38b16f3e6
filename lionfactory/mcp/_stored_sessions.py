"""MCP sessions that survive the server: session branches in a `BranchStore`.

Around every tool call the server asks two things of `StoredSessions`:

* `resume` before it: if the store holds a newer version of the session's
  branch than the one in memory (the server restarted, or another server
  sharing the store answered the previous call), load it and serve the
  session with it. The restored branch has its whole record and active
  view, so the coding toolkit's read-before-edit evidence is intact.
* `save` after it: save the branch, so the next call finds it wherever it
  lands.

A session's branch id is derived from the transport and the session key (a
UUID5 of ``"http:"`` and the MCP session id, or of ``"stdio:"`` and the
stream's session name), so every server sharing the store finds the same
branch without a lookup table, and a name on one transport never reaches a
session of the other.

What a session id grants: the session's branch, that is, its conversation
and its read-before-edit evidence, which lets its holder edit files the
session read. So a stored session is resumed only by a holder of an id that
was issued for it:

* Over HTTP the ids are the SDK's random 128-bit session ids, issued by a
  server at the handshake. A server resumes an id unknown to it only when
  the store holds a session branch that an HTTP server stored for that id
  (namespaced as above, and marked with the transport in its metadata); any
  other id, ``stdio`` or a stdio session's name included, is answered
  "Session not found" as the SDK answers unknown ids.
* On stdio the stream has no id: the session's name is random per server
  start (so two stdio servers on one store never share a session), unless
  the user names one to resume it after a restart. Whoever can start the
  server with the store can read the store anyway, so a name is enough
  there.

Anyone who can write the store can forge any of this: a store is trusted as
much as the code of the servers that share it. A save that meets a
newer version (two servers answered calls of one session at the same time)
is a `ConflictError`: the call's result still goes to the client, but its
record is not stored over the other one; the server logs a warning and
serves the stored version from the next call on.

Over Streamable HTTP a restarted server does not know the client's session
id and the SDK would answer 404. `adopt_stored_sessions` wraps the server's
ASGI app: a new session's (empty) branch is stored before the response that
opens the session leaves, and a request whose session id is unknown to this
process but stored gets a session of that id, already initialized (the
client did the handshake with the server that created the session), and is
then served as usual. So servers sharing a store can take any request of
any session, the handshake's follow-ups included. This reaches into the
SDK's session manager; the version range of the ``mcp`` extra pins the SDK
it was written against.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs

from lionfactory import Branch
from lionfactory.backends import BranchStore
from lionfactory.errors import ConfigurationError, ConflictError

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from starlette.types import ASGIApp, Receive, Scope, Send

    from lionfactory.mcp._serve import SessionBranches

__all__ = [
    "NotThisSession",
    "StoredSessions",
    "adopt_stored_sessions",
    "attach",
    "attached",
    "check_session_name",
    "new_session_name",
    "session_branch_id",
]

logger = logging.getLogger("lionfactory")

_SESSIONS = uuid.UUID("6a1f0a51-3c1e-5b8e-9c39-1f0e5d2b7a19")

Transport = Literal["http", "stdio"]
TRANSPORT_KEY = "mcp_session_transport"
"""Branch metadata: the transport a stored session belongs to (checked before resuming it)."""
CLOSED_KEY = "mcp_session_closed"
"""Branch metadata: the client ended this session (DELETE); it is never resumed again."""
MAX_SESSION_NAME = 200


def session_branch_id(session: str, transport: Transport) -> uuid.UUID:
    """The id of the branch stored for an MCP session of `transport` (the same on every server)."""
    return uuid.uuid5(_SESSIONS, f"{transport}:{session}")


def check_session_name(name: str) -> str:
    """`name` if it can name a stdio session, else `ValueError` saying why."""
    if not isinstance(name, str) or not name or len(name) > MAX_SESSION_NAME:
        raise ValueError(f"a session name is 1 to {MAX_SESSION_NAME} characters, got {name!r:.250}")
    if not name.isprintable():
        raise ValueError(f"a session name is printable text, got {name!r:.250}")
    return name


def new_session_name() -> str:
    """A random stdio session name (128 bits, as the SDK's HTTP session ids)."""
    return secrets.token_hex(16)


def _session_name(name: str | None) -> str:
    return new_session_name() if name is None else check_session_name(name)


class NotThisSession(ConfigurationError):
    """The store holds a branch at a session's id that was not stored as that session."""


@attrs.define(eq=False)
class StoredSessions:
    """Loads and saves the session branches of one server (see the module docstring).

    Args:
        store: the branch store.
        new_branch: makes the branch of a new session.
        resources: live objects to rebuild loaded branches with.
        stream_session: the session name of a stream transport (stdio);
            None for a random one (a new session per server start).
    """

    store: BranchStore
    new_branch: Callable[[], Branch]
    resources: Mapping[str, Any]
    stream_session: str = attrs.field(default=None, converter=_session_name)
    _locks: dict[str, anyio.Lock] = attrs.field(factory=dict, init=False)

    @staticmethod
    def transport(key: str) -> Transport:
        """The transport of session `key`: "" is the stream's session, anything else HTTP's."""
        return "http" if key else "stdio"

    def branch_id(self, key: str) -> uuid.UUID:
        """The stored branch id of session `key` ("" is the stream's session)."""
        return session_branch_id(key or self.stream_session, self.transport(key))

    async def load(self, key: str) -> Branch | None:
        """The stored branch of session `key`, or None when the store has none.

        Raises:
            NotThisSession: the store holds a branch at that id that was not
                stored as a session of this transport.
        """
        branch_id = self.branch_id(key)
        if not await self.store.version(branch_id):
            return None
        branch = await self.store.load(branch_id, resources=self.resources)
        transport = self.transport(key)
        if branch.metadata.get(TRANSPORT_KEY) != transport:
            raise NotThisSession(
                f"the store holds a branch at the id of this {transport} MCP session that "
                f"was not stored as one; it is not resumed. Remove branch {branch_id} from "
                f"the store, or use another session."
            )
        return branch

    async def resume(self, sessions: SessionBranches, key: str) -> None:
        """Before a call: serve session `key` with the newest stored branch, or a new one.

        Under the session's lock, so two first calls of a new session arriving
        together make one branch, not two.
        """
        async with self._lock(key):
            await self._resume(sessions, key)

    async def _resume(self, sessions: SessionBranches, key: str) -> None:
        current = sessions.get(key)
        stored = await self.store.version(self.branch_id(key))
        if current is not None and stored <= self.store.known_version(current):
            return
        branch = await self.load(key) if stored else None
        if branch is not None and branch.metadata.get(CLOSED_KEY):
            raise NotThisSession("this MCP session was ended by its client; open a new session")
        sessions.adopt(key, branch if branch is not None else self._fresh(key))

    async def create(self, session: str) -> None:
        """Store a new HTTP session's branch as soon as the session exists.

        So every server sharing the store knows the session from its first
        request on (the tool listing, say), not only from its first tool call.
        """
        # A conflict means it is stored already: nothing to do.
        with contextlib.suppress(ConflictError):
            await self.store.save(self._fresh(session))

    async def resumable(self, session: str) -> bool:
        """Whether HTTP session id `session` may be resumed: an HTTP server stored it, open."""
        try:
            branch = await self.load(session)
        except NotThisSession as exc:
            logger.warning("refused to resume MCP session: %s", exc)
            return False
        return branch is not None and not branch.metadata.get(CLOSED_KEY)

    async def close(self, session: str) -> None:
        """The client ended HTTP session `session`: store it as closed, so no server resumes it.

        A marker, not a deletion: a call of the session still running saves
        its branch after this, and that save meets the newer closed version
        (a `ConflictError`, logged) instead of storing the session again.
        """
        async with self._lock(session):
            for _ in range(3):
                try:
                    branch = await self.load(session)
                except NotThisSession:
                    return
                if branch is None:
                    branch = self._fresh(session)
                branch.metadata[CLOSED_KEY] = True
                try:
                    await self.store.save(branch)
                except ConflictError:
                    continue
                return
            logger.warning("MCP session %r could not be stored as closed", session[:64])

    def _fresh(self, key: str) -> Branch:
        """A new session's branch with the session's id, marked with its transport.

        Replaying the factories through from_dict builds it with that id from
        the start (a factory may register the id somewhere, as the messenger
        does).
        """
        data = self.new_branch().to_dict()
        data["id"] = str(self.branch_id(key))
        data["metadata"] = {**data.get("metadata", {}), TRANSPORT_KEY: self.transport(key)}
        return Branch.from_dict(data, resources=self.resources)

    def _lock(self, key: str) -> anyio.Lock:
        return self._locks.setdefault(key, anyio.Lock())

    async def save(self, key: str, branch: Branch) -> None:
        """After a call: save the session's branch (one save at a time per session)."""
        async with self._lock(key):
            try:
                await self.store.save(branch)
            except ConflictError as exc:
                logger.warning("MCP session %r was not saved: %s", key[:64], exc)


_ATTACHED: weakref.WeakKeyDictionary[Any, StoredSessions] = weakref.WeakKeyDictionary()


def attach(server: Server[Any], stored: StoredSessions) -> None:
    """Remember which `StoredSessions` a server built by `create_mcp_server` uses."""
    _ATTACHED[server] = stored


def attached(server: Server[Any]) -> StoredSessions | None:
    """The `StoredSessions` of a server built by `create_mcp_server`, or None without a store."""
    return _ATTACHED.get(server)


def adopt_stored_sessions(app: ASGIApp, server: Server[Any]) -> ASGIApp:
    """Wrap a server's Streamable HTTP app so its sessions live in its store.

    A new session's branch is stored before the response that opens it
    leaves, and a request for a session unknown to this process but stored
    (after a restart, or opened by another server) resumes it.

    Args:
        app: what ``server.streamable_http_app()`` returned.
        server: that server, made by `create_mcp_server` with a store.
    """
    from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

    stored = _ATTACHED[server]
    header = MCP_SESSION_ID_HEADER.lower().encode("latin-1")

    async def adopting(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        session = next((v.decode("latin-1") for k, v in scope["headers"] if k == header), None)
        if session is not None:
            await _adopt(server, stored, session, scope)
            await app(scope, receive, send)
            return

        async def send_after_storing(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] < 300:
                opened = next((v for k, v in message.get("headers", ()) if k == header), None)
                if opened is not None:
                    await stored.create(opened.decode("latin-1"))
            await send(message)

        await app(scope, receive, send_after_storing)

    return adopting


async def _adopt(server: Server[Any], stored: StoredSessions, session: str, scope: Scope) -> None:
    """Give the session manager a live, initialized session `session` if an HTTP server stored it.

    Any other id is left to the SDK, which answers "Session not found".
    """
    from mcp.server.connection import Connection
    from mcp.server.runner import serve_connection
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    manager: Any = server.session_manager
    if session in manager._server_instances or len(session) > 200:
        return
    if not await stored.resumable(session):
        return
    version_header = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")
    hint = next((v.decode("latin-1") for k, v in scope["headers"] if k == version_header), None)
    async with manager._session_creation_lock:
        if session in manager._server_instances or manager._task_group is None:
            return
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session,
            is_json_response_enabled=manager.json_response,
            event_store=manager.event_store,
            security_settings=manager.security_settings,
            retry_interval=manager.retry_interval,
            idle_timeout=manager.session_idle_timeout,
        )
        manager._server_instances[session] = transport

        async def run(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            async with transport.connect() as (read_stream, write_stream):
                task_status.started()
                try:
                    idle = transport.idle_scope or anyio.CancelScope()
                    with idle:
                        dispatcher: Any = JSONRPCDispatcher(
                            read_stream, write_stream, inline_methods=frozenset({"initialize"})
                        )
                        connection = Connection.for_loop(
                            dispatcher, session_id=session, protocol_version_hint=hint
                        )
                        # The handshake happened with the server that made
                        # the session; this one continues it.
                        connection.initialized.set()
                        await serve_connection(
                            server,
                            dispatcher,
                            connection=connection,
                            lifespan_state=manager._lifespan_state,
                        )
                except Exception:
                    logger.exception("resumed MCP session %s crashed", session[:64])
                finally:
                    await manager._discard_session(session, transport)

        await manager._task_group.start(run)
    logger.info("resumed stored MCP session %s", session[:64])
