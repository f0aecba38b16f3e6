"""MCP sessions that survive the server: session branches in a `BranchStore`.

Around every tool call the server asks two things of `StoredSessions`:

* `resume` before it: if the store holds a newer version of the session's
  branch than the one in memory (the server restarted, or another server
  sharing the store answered the previous call), load it and serve the
  session with it. The restored branch has its whole record and active
  view, so the coding toolkit's read-before-edit evidence is intact.
* `save` after it: save the branch, so the next call finds it wherever it
  lands.

A session's branch id is derived from the session key (a UUID5 of the MCP
session id, or of the stream's name on stdio), so every server sharing the
store finds the same branch without a lookup table. A save that meets a
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
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from lionfactory import Branch
from lionfactory.backends import BranchStore
from lionfactory.errors import ConflictError

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from starlette.types import ASGIApp, Receive, Scope, Send

    from lionfactory.mcp._serve import SessionBranches

__all__ = ["StoredSessions", "adopt_stored_sessions", "attach", "session_branch_id"]

logger = logging.getLogger("lionfactory")

_SESSIONS = uuid.UUID("6a1f0a51-3c1e-5b8e-9c39-1f0e5d2b7a19")


def session_branch_id(session: str) -> uuid.UUID:
    """The id of the branch stored for an MCP session (the same on every server)."""
    return uuid.uuid5(_SESSIONS, session)


@attrs.define(eq=False)
class StoredSessions:
    """Loads and saves the session branches of one server (see the module docstring).

    Args:
        store: the branch store.
        new_branch: makes the branch of a new session.
        resources: live objects to rebuild loaded branches with.
        stream_session: the session name of a stream transport (stdio).
    """

    store: BranchStore
    new_branch: Callable[[], Branch]
    resources: Mapping[str, Any]
    stream_session: str = "stdio"
    _locks: dict[str, anyio.Lock] = attrs.field(factory=dict, init=False)

    def branch_id(self, key: str) -> uuid.UUID:
        """The stored branch id of session `key` ("" is the stream's session)."""
        return session_branch_id(key or self.stream_session)

    async def resume(self, sessions: SessionBranches, key: str) -> None:
        """Before a call: serve session `key` with the newest stored branch, or a new one.

        Under the session's lock, so two first calls of a new session arriving
        together make one branch, not two.
        """
        async with self._lock(key):
            await self._resume(sessions, key)

    async def _resume(self, sessions: SessionBranches, key: str) -> None:
        branch_id = self.branch_id(key)
        current = sessions.get(key)
        stored = await self.store.version(branch_id)
        if current is not None and stored <= self.store.known_version(current):
            return
        if stored:
            branch = await self.store.load(branch_id, resources=self.resources)
        else:
            branch = self._fresh(branch_id)
        sessions.adopt(key, branch)

    async def create(self, session: str) -> None:
        """Store a new HTTP session's branch as soon as the session exists.

        So every server sharing the store knows the session from its first
        request on (the tool listing, say), not only from its first tool call.
        """
        # A conflict means it is stored already: nothing to do.
        with contextlib.suppress(ConflictError):
            await self.store.save(self._fresh(self.branch_id(session)))

    def _fresh(self, branch_id: uuid.UUID) -> Branch:
        """A new session's branch with the session's id.

        Replaying the factories through from_dict builds it with that id from
        the start (a factory may register the id somewhere, as the messenger
        does).
        """
        data = self.new_branch().to_dict()
        data["id"] = str(branch_id)
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
            await _adopt(server, stored.store, session, scope)
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


async def _adopt(server: Server[Any], store: BranchStore, session: str, scope: Scope) -> None:
    """Give the session manager a live, initialized session `session` if the store has it."""
    from mcp.server.connection import Connection
    from mcp.server.runner import serve_connection
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    manager: Any = server.session_manager
    if session in manager._server_instances or len(session) > 200:
        return
    if not await store.version(session_branch_id(session)):
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
