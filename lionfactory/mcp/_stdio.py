"""The stdio transport: newline-delimited JSON-RPC, spoken without the MCP SDK.

Why not the SDK's ``stdio_server``: importing any part of the SDK imports all
of it (its package ``__init__`` loads the client, the high-level server,
Starlette, an HTTP client and about 580 pydantic models for two protocol
eras), which was most of a cold start; its stdin reader is a worker thread
that hops to the event loop once per line and keeps the process alive for a
while after stdin closes; and every message is validated by pydantic both
ways. A desktop client or an agent SDK that spawns the server and gives it a
few seconds to answer ``initialize`` felt all of it.

Both protocol eras are spoken, and the client's first request decides which
one a connection speaks (as the SDK's servers do). The handshake era
(2024-11-05 to 2025-11-25): ``initialize``, ``ping``, ``tools/list``,
``tools/call`` and ``notifications/cancelled``. The 2026-07-28 era
(`lionfactory.mcp._stateless`): every request carries its version and the
client's capabilities in ``_meta``, ``server/discover`` names the version,
results carry ``resultType`` and the server's identity, and ``tools/list``
is cacheable. A request of the other era is refused with the error the
specification names (``initialize`` on a 2026 connection: -32022 with the
supported versions). The connection keeps one branch in both eras: the pipe
is one client for as long as it is open. A call whose request carries a
progress token gets ``notifications/progress`` while it runs.

I/O runs on the event loop: stdin is read when the loop says it is readable
(``os.read`` on a readable pipe returns what is there without blocking, so
the descriptor is never switched to non-blocking mode, which would change it
for every process sharing it). A write is different: a pipe is "writable"
once it has any room, and a blocking write of a reply larger than that room
waits for the client to read, stopping the event loop (every running call,
and the end-of-file that ends the server) with it. So replies are written
with ``RWF_NOWAIT``, the per-call form of non-blocking mode for pipes and
sockets (Linux): what fits is written, and the rest waits on the loop. A
terminal, a file, or a system without it is written as before. Tool
calls run as tasks, so a ``ping`` or a second call is answered while a long
command runs; the rest is answered inline. When stdin reaches end of file,
the client has gone: the calls in flight are cancelled (the process seam
kills their process groups) and the server returns at once.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from lionfactory._acting import ActionResult
from lionfactory.mcp._frames import decode_frame
from lionfactory.mcp._protocol import (
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    ServedTools,
    call_result_json,
    unknown_tool_message,
)
from lionfactory.mcp._stateless import (
    MODERN_VERSIONS,
    PROTOCOL_VERSION_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    discover_result,
    envelope_problem,
    is_modern,
    listing_result,
    progress_token,
    resource_result,
    result_meta,
    run_with_progress,
)

if TYPE_CHECKING:
    from lionfactory.mcp._resources import ResourceWatch, WorkspaceResources

__all__ = ["Handshake", "answer_initialize", "serve_stdio"]

logger = logging.getLogger("lionfactory.mcp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_BUSY = -32000
"""The implementation-defined JSON-RPC error of a call refused because too many are running."""

MAX_IN_FLIGHT = 64
"""Tool calls one connection may have running at once; more are refused (`SERVER_BUSY`)."""
MAX_QUEUED_BYTES = 4 << 20
"""Reply bytes waiting for the client to read them before the server stops reading requests."""

_CHUNK = 1 << 16
_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)  # 0: not on this system
# What pwritev2 says of a descriptor it cannot write without blocking (a
# terminal, a regular file) or of a kernel without the flag.
_NOWAIT_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.ESPIPE})
_RESOURCE_METHODS = frozenset(
    {
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
    }
)
# The subscribe pair is gone in 2026-07-28 (its clients listen through
# ``subscriptions/listen``, which this server does not offer).
_HANDSHAKE_ONLY_RESOURCE_METHODS = frozenset({"resources/subscribe", "resources/unsubscribe"})
Act = Callable[[str, Mapping[str, Any]], Awaitable[ActionResult]]


def _pollable(fd: int) -> bool:
    """Whether the event loop can wait on `fd` (pipes, sockets, terminals; not regular files)."""
    poller = select.epoll() if hasattr(select, "epoll") else None
    if poller is None:
        return True
    with poller:
        try:
            poller.register(fd, select.EPOLLIN)
        except PermissionError:
            return False
    return True


class _ClientGone(Exception):
    """The client closed its end of stdout: nobody is left to answer."""


@attrs.define(eq=False)
class _Pipe:
    """One end of the stdio pair: waits on the loop, then reads or writes without blocking it."""

    fd: int
    pollable: bool
    lock: anyio.Lock = attrs.field(factory=anyio.Lock)
    # The start of a line whose end has not arrived; a bytearray, so that a
    # multi-megabyte request read in 64 KiB chunks is appended, not copied
    # again for every chunk.
    pending: bytearray = attrs.field(factory=bytearray)
    # Replies waiting for the client to read them (see `room`).
    max_queued: int = MAX_QUEUED_BYTES
    queued: int = 0
    _room: anyio.Event | None = None
    _poller: select.poll | None = None
    _nowait: bool = _NOWAIT != 0
    # Bytes read before the server was serving (`answer_initialize`), split
    # into lines by the first `read_lines` as if it had just read them.
    preread: bytes = b""

    def _writable_now(self) -> bool:
        """Whether the loop would find the descriptor writable at once (a zero-timeout poll).

        The same readiness `anyio.wait_writable` waits for, asked without
        going through the scheduler: waiting on a pipe that has room cost
        about 20 us of CPU and 40 us of wall time per 45 KB reply (the write
        itself costs under 10 us of CPU). Where there is no ``poll``, the
        loop is asked as before.
        """
        if not hasattr(select, "poll"):
            return False
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.fd, select.POLLOUT)
        return any(events & select.POLLOUT for _, events in self._poller.poll(0))

    async def read_lines(self) -> list[bytes] | None:
        """The complete lines that arrived (maybe none), or None at end of file."""
        if self.preread:
            chunk, self.preread = self.preread, b""
            await anyio.lowlevel.checkpoint()
        else:
            if self.pollable:
                await anyio.wait_readable(self.fd)
            else:
                await anyio.lowlevel.checkpoint()
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:  # a descriptor someone else made non-blocking: wait again
                return []
        if not chunk:
            last = bytes(self.pending)
            self.pending.clear()
            return [last] if last.strip() else None
        head, newline, tail = chunk.rpartition(b"\n")
        if not newline:
            self.pending += chunk
            return []
        self.pending += head
        lines = bytes(self.pending).split(b"\n")
        self.pending = bytearray(tail)
        return lines

    async def send(self, data: bytes) -> None:
        """Write `data` whole (one reply at a time); counted as queued until it is written."""
        self.queued += len(data)
        try:
            await self._write(data)
        finally:
            self.queued -= len(data)
            if self.queued <= self.max_queued and self._room is not None:
                self._room.set()
                self._room = None

    async def room(self) -> None:
        """Wait until the replies queued on this pipe are within `max_queued` bytes."""
        while self.queued > self.max_queued:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()

    async def _write(self, data: bytes) -> None:
        async with self.lock:
            view = memoryview(data)
            while view:
                try:
                    written = await self._write_some(view[:_CHUNK])
                except (BrokenPipeError, ConnectionResetError):
                    raise _ClientGone from None
                view = view[written:]

    async def _write_some(self, chunk: memoryview) -> int:
        """Write a part of `chunk` (maybe none of it) without blocking the event loop."""
        if self._nowait:
            try:
                return os.pwritev(self.fd, [chunk], -1, _NOWAIT)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                return 0
            except OSError as exc:
                if exc.errno not in _NOWAIT_UNSUPPORTED:
                    raise
                self._nowait = False  # a terminal or a file: written as below from now on
        if self.pollable and not self._writable_now():
            await anyio.wait_writable(self.fd)
        try:
            return os.write(self.fd, chunk)
        except BlockingIOError:  # a descriptor someone else made non-blocking
            return 0


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8: send the same JSON with \\u escapes.
        return json.dumps(json.loads(text)).encode("ascii")


def _error(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return _encode(json.dumps(body, ensure_ascii=False) + "\n")


def _valid_id(request_id: Any) -> bool:
    # MCP request ids are strings or integers (never null, and JSON-RPC asks
    # numbers to have no fractional part). A float is refused, NaN and
    # Infinity among them: Python's json reads them, but echoing them back
    # would write text that is not JSON; anything else (a list nested
    # thousands deep, say) could not even be echoed back safely.
    return isinstance(request_id, str) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    )


def _busy(request_id: Any, limit: int) -> bytes:
    return _error(
        request_id,
        SERVER_BUSY,
        f"Server busy: {limit} tool calls are already running on this connection. "
        "Wait for their replies (or cancel some) before sending more calls.",
    )


def _result(request_id: Any, result: Mapping[str, Any]) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return _encode(json.dumps(body, ensure_ascii=False) + "\n")


def server_info(
    name: str, version: str, instructions: str | None, resources: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What ``initialize`` answers besides the version: capabilities, identity, instructions.

    Args:
        name: the server name clients see.
        version: the server version clients see.
        instructions: text given to clients at ``initialize``, or None.
        resources: the ``resources`` capability, or None when no resources are served.
    """
    info: dict[str, Any] = {
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": name, "version": version},
    }
    if resources is not None:
        info["capabilities"]["resources"] = dict(resources)
    if instructions is not None:
        info["instructions"] = instructions
    return info


def _initialized(
    request_id: Any, params: Mapping[str, Any], info: Mapping[str, Any]
) -> tuple[bytes, str]:
    """The reply to a handshake-era ``initialize``, and the version it agreed on."""
    asked = params.get("protocolVersion")
    version = asked if asked in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION
    return _result(request_id, {**info, "protocolVersion": version}), version


@attrs.frozen
class Handshake:
    """What `answer_initialize` read from stdin before the server was serving.

    Attributes:
        version: the protocol version agreed on when it answered an
            ``initialize``; None when it answered nothing.
        unread: the bytes it read after that request (all of them when it
            answered nothing): the server reads them first, as if they had
            just arrived.
        info: what it answered (or would have) besides the version.
    """

    version: str | None
    unread: bytes
    info: Mapping[str, Any]


def answer_initialize(
    info: Mapping[str, Any], *, stdin: int = 0, stdout: int = 1
) -> Handshake | None:
    """Answer an ``initialize`` request already waiting on `stdin`, before the server loads.

    A client that spawns the server sends ``initialize`` at once and waits
    for the reply; the program (the served tools' modules, trio, the
    toolkit's build) took longer to load than the Node reference server
    takes to start and answer. The reply depends on nothing it loads (the
    identity and capabilities in `info`, `server_info`), so a command line
    can answer it from the standard library, then load while the client
    reads the reply and sends its next request, which `serve_stdio` reads
    from the returned `Handshake` first.

    Only what is already there is read (one read, no waiting): a client
    that has sent nothing yet, a first request that is not a well-formed
    handshake-era ``initialize`` (a 2026-07-28 request, a ping, a line that
    is not JSON) or an incomplete line is left to the server, unanswered,
    exactly as it arrived. The trade-off: a served factory that fails to
    build now fails after the handshake, and the client sees the server end
    (the error on stderr) instead of failing to start.

    Returns:
        What was read, to hand to `serve_stdio`; None when nothing was read
        (nothing waiting, or `stdin` cannot be polled).
    """
    if not _pollable(stdin) or not hasattr(select, "poll"):
        return None
    poller = select.poll()
    poller.register(stdin, select.POLLIN)
    if not poller.poll(0):
        return None
    try:
        chunk = os.read(stdin, _CHUNK)
    except BlockingIOError:
        return None
    line, newline, rest = chunk.partition(b"\n")
    if not newline:
        return Handshake(None, chunk, info)
    try:
        message = decode_frame(line)
    except ValueError:
        return Handshake(None, chunk, info)
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != "initialize"
        or not _valid_id(message.get("id"))
    ):
        return Handshake(None, chunk, info)
    params = message.get("params")
    reply, version = _initialized(message["id"], params if isinstance(params, dict) else {}, info)
    view = memoryview(reply)
    try:
        # A few hundred bytes into a pipe nobody has written to yet: room
        # for them all, so the blocking write does not wait (and a pipe
        # writes up to PIPE_BUF, 4 KiB, whole or not at all).
        while view:
            view = view[os.write(stdout, view) :]
    except OSError:
        # The client has gone: left unanswered, the server answers the
        # request again and finds that out itself (and ends quietly).
        if len(view) == len(reply):
            return Handshake(None, chunk, info)
    return Handshake(version, rest, info)


@attrs.define(eq=False)
class _Connection:
    """One client on the stdio pair: the negotiated version and the calls in flight."""

    served: ServedTools
    act: Act
    out: _Pipe
    server_info: dict[str, Any]
    version: str = LATEST_HANDSHAKE_VERSION
    in_flight: dict[str, anyio.CancelScope] = attrs.field(factory=dict)
    # The protocol era, decided once by the client's first request (as the
    # SDK's servers do): True for 2026-07-28 (every request carries its own
    # envelope), False for the initialize handshake, None before any request.
    modern: bool | None = None
    max_in_flight: int = MAX_IN_FLIGHT
    running: int = 0
    resources: WorkspaceResources | None = None
    watch: ResourceWatch | None = None

    async def watch_resources(self) -> None:
        """Tell the client about subscribed files that changed and a listing that did."""
        assert self.watch is not None
        while True:
            updated, listed = await self.watch.changes()
            for uri in updated:
                note = {"method": "notifications/resources/updated", "params": {"uri": uri}}
                await self.out.send(_encode(json.dumps({"jsonrpc": "2.0", **note}) + "\n"))
            if listed:
                note = {"method": "notifications/resources/list_changed", "params": {}}
                await self.out.send(_encode(json.dumps({"jsonrpc": "2.0", **note}) + "\n"))

    async def receive(self, line: bytes, group: anyio.abc.TaskGroup) -> None:
        """Answer one frame; whatever goes wrong costs that frame's reply, never the connection."""
        try:
            message = decode_frame(line)
        except ValueError as exc:
            await self.out.send(_error(None, PARSE_ERROR, f"Parse error: {exc!s:.300}"))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            await self.out.send(
                _error(None, INVALID_REQUEST, "Invalid request: send one JSON-RPC 2.0 object")
            )
            return
        method = message.get("method")
        if not isinstance(method, str):
            return  # a response: this server sends no requests, so there is nothing to match
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if "id" not in message:
            await self._guarded(None, self._notify(method, params))
            return
        request_id = message["id"]
        if not _valid_id(request_id):
            await self.out.send(
                _error(None, INVALID_REQUEST, "Invalid request: an id is a string or an integer")
            )
            return
        if method == "tools/call":
            if self.running >= self.max_in_flight:
                await self.out.send(_busy(request_id, self.max_in_flight))
                return
            self.running += 1
            group.start_soon(self._run_call, request_id, params)
        else:
            await self._guarded(request_id, self._reply(request_id, method, params))

    async def _guarded(self, request_id: Any, work: Awaitable[None]) -> None:
        """Await one request's `work`; an exception in it answers that request (if it has an id)."""
        try:
            await work
        except _ClientGone:
            raise
        except Exception as exc:
            logger.exception("serving one stdio request failed")
            if request_id is not None:
                text = f"Internal error: {type(exc).__name__}: {exc!s:.300}"
                await self.out.send(_error(request_id, INTERNAL_ERROR, text))

    async def _run_call(self, request_id: Any, params: Mapping[str, Any]) -> None:
        try:
            await self._guarded(request_id, self._call(request_id, params))
        finally:
            self.running -= 1

    async def _notify(self, method: str, params: Mapping[str, Any]) -> None:
        self._notified(method, params)

    async def _reply(self, request_id: Any, method: str, params: Mapping[str, Any]) -> None:
        if self.resources is not None and method in _RESOURCE_METHODS:
            # The era is checked first, as for every other request: a
            # 2026-07-28 result must carry that era's fields.
            refused = self._refused(request_id, method, params)
            if refused is None and self.modern and method in _HANDSHAKE_ONLY_RESOURCE_METHODS:
                refused = _error(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            await self.out.send(refused or await self._resource(request_id, method, params))
            return
        await self.out.send(self._answer(request_id, method, params))

    async def _resource(self, request_id: Any, method: str, params: Mapping[str, Any]) -> bytes:
        from lionfactory.mcp._resources import ResourceError

        assert self.resources is not None
        # A 2026-07-28 client is told of changes only through subscriptions
        # it opened (there are none here), so its listings are not watched.
        watch = None if self.modern else self.watch
        try:
            if method == "resources/list":
                result = await self.resources.list(params)
                if watch is not None and not params.get("cursor"):
                    await anyio.to_thread.run_sync(watch.take_listing)
            elif method == "resources/read":
                result = await self.resources.read(params)
            elif method == "resources/subscribe" and watch is not None:
                result = watch.subscribe(params)
            elif method == "resources/unsubscribe" and watch is not None:
                result = watch.unsubscribe(params)
            else:
                result = self.resources.templates()
        except ResourceError as exc:
            return _error(request_id, exc.code, exc.message)
        if self.modern:
            result = resource_result(result, self.server_info["serverInfo"])
        return _result(request_id, result)

    def _notified(self, method: str, params: Mapping[str, Any]) -> None:
        if method == "notifications/cancelled":
            scope = self.in_flight.get(json.dumps(params.get("requestId")))
            if scope is not None:
                scope.cancel()

    def _refused(self, request_id: Any, method: str, params: Mapping[str, Any]) -> bytes | None:
        """The error reply for a request of the other era or with a bad envelope, else None."""
        modern = method != "initialize" and is_modern(params)
        if self.modern is None:
            self.modern = modern
        if not self.modern:
            if modern:
                return _error(
                    request_id,
                    INVALID_REQUEST,
                    "This connection began with the initialize handshake; requests carrying the "
                    "2026-07-28 envelope are not accepted on it. Open a new connection for them.",
                )
            return None
        if method == "initialize":
            return _error(
                request_id,
                UNSUPPORTED_PROTOCOL_VERSION,
                "This connection serves the 2026-07-28 protocol (its first request said so); "
                "the initialize handshake is not accepted on it. Open a new connection for it.",
                {"supported": list(MODERN_VERSIONS), "requested": params.get("protocolVersion")},
            )
        problem = envelope_problem(params)
        if problem is None:
            return None
        return _error(request_id, *problem)

    def _request_version(self, params: Mapping[str, Any]) -> str:
        if self.modern:
            version: str = params["_meta"][PROTOCOL_VERSION_KEY]
            return version
        return self.version

    def _answer(self, request_id: Any, method: str, params: Mapping[str, Any]) -> bytes:
        refused = self._refused(request_id, method, params)
        if refused is not None:
            return refused
        if self.modern:
            return self._answer_modern(request_id, method, params)
        if method == "initialize":
            reply, self.version = _initialized(request_id, params, self.server_info)
            return reply
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/list":
            return _result(request_id, {"tools": self.served.listing(self.version)})
        return _error(request_id, METHOD_NOT_FOUND, f"Method not found: {method:.100}")

    def _answer_modern(self, request_id: Any, method: str, params: Mapping[str, Any]) -> bytes:
        identity = self.server_info["serverInfo"]
        if method == "server/discover":
            capabilities = dict(self.server_info["capabilities"])
            if self.resources is not None:
                # No subscribe pair and no unsolicited list changes in this era.
                capabilities["resources"] = self.resources.capabilities(watched=False)
            instructions = self.server_info.get("instructions")
            return _result(request_id, discover_result(capabilities, identity, instructions))
        if method == "tools/list":
            listing = self.served.listing(self._request_version(params))
            return _result(request_id, listing_result(listing, identity))
        # ping, logging and the other handshake-era methods are gone in 2026-07-28.
        return _error(request_id, METHOD_NOT_FOUND, f"Method not found: {method:.100}")

    async def _call(self, request_id: Any, params: Mapping[str, Any]) -> None:
        refused = self._refused(request_id, "tools/call", params)
        if refused is not None:
            await self.out.send(refused)
            return
        version = self._request_version(params)
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or name not in self.served.names:
            message = unknown_tool_message(name, self.served.names)
            await self.out.send(_error(request_id, INVALID_PARAMS, message))
            return
        if arguments is not None and not isinstance(arguments, dict):
            await self.out.send(
                _error(request_id, INVALID_PARAMS, "tools/call arguments must be a JSON object")
            )
            return
        key = json.dumps(request_id)
        reply = None  # a cancelled request gets no reply
        with anyio.CancelScope() as scope:
            self.in_flight[key] = scope
            try:
                action = await run_with_progress(
                    self._progress(params), lambda: self.act(name, arguments or {})
                )
            except Exception as exc:
                logger.exception("serving a call of %r failed", name)
                reply = _error(request_id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            else:
                meta = result_meta(self.server_info["serverInfo"]) if self.modern else None
                reply = _encode(
                    call_result_json(
                        action,
                        version,
                        meta,
                        members=',"resultType":"complete"' if self.modern else "",
                        before=f'{{"jsonrpc":"2.0","id":{key},"result":',
                        after="}\n",
                    )
                )
            finally:
                if self.in_flight.get(key) is scope:  # a client may reuse an id; keep the latest
                    del self.in_flight[key]
        if reply is not None:
            await self.out.send(reply)

    def _progress(
        self, params: Mapping[str, Any]
    ) -> Callable[[float, str], Awaitable[None]] | None:
        """How to report a call's progress, when its request carries a progress token."""
        token = progress_token(params)
        if token is None:
            return None

        async def report(progress: float, message: str) -> None:
            body = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": progress, "message": message},
            }
            await self.out.send(_encode(json.dumps(body, ensure_ascii=False) + "\n"))

        return report


async def serve_stdio(
    served: ServedTools,
    act: Act,
    *,
    name: str,
    version: str,
    instructions: str | None = None,
    stdin: int = 0,
    stdout: int = 1,
    on_ready: Callable[[str], object] | None = None,
    max_in_flight: int = MAX_IN_FLIGHT,
    max_queued_bytes: int = MAX_QUEUED_BYTES,
    resources: WorkspaceResources | None = None,
    handshake: Handshake | None = None,
) -> None:
    """Serve `served` on a stdio pair until end of file on `stdin`, or SIGTERM.

    SIGTERM ends it as end of file does (when it runs in the main thread,
    the only one that can receive signals, and the program left SIGTERM to
    its default action; a handler of the program's own is left to get it):
    clients built on the TypeScript SDK before 1.24.3 close a stdio server
    with SIGTERM alone, and later ones send it when the server has not
    exited 2 s after its input closed. Killed by the signal's default
    action, the server could run no exit hook, and a background job it had
    started went on without it.

    What one connection can make the server hold is bounded: at most
    `max_in_flight` tool calls run at once (a further call is refused at once
    with a ``-32000`` "server busy" error, and requests keep being read, so
    pings and cancellations still work), and once more than
    `max_queued_bytes` of replies wait for a client that does not read them,
    the server stops reading requests until the client catches up.

    Args:
        served: the tools and their listing.
        act: runs one call for the connection's session (``Branch.act``).
        name: the server name clients see.
        version: the server version clients see.
        instructions: text given to clients at ``initialize``.
        stdin: the descriptor requests arrive on.
        stdout: the descriptor replies go to (nothing else may write to it).
        on_ready: called with ``"stdio"`` before the first read.
        max_in_flight: tool calls that may run at once.
        max_queued_bytes: reply bytes that may wait for the client before
            the server stops reading.
        resources: workspace files to serve as resources, or None.
        handshake: what `answer_initialize` read from `stdin` (and maybe
            answered) while the program loaded; read before `stdin`.
    """
    capability = None if resources is None else resources.capabilities(watched=True)
    info = server_info(name, version, instructions, capability)
    watch = None
    if resources is not None:
        from lionfactory.mcp._resources import ResourceWatch

        watch = ResourceWatch(resources)
    source = _Pipe(stdin, _pollable(stdin))
    out = _Pipe(stdout, _pollable(stdout), max_queued=max_queued_bytes)
    connection = _Connection(
        served, act, out, info, max_in_flight=max_in_flight, resources=resources, watch=watch
    )
    if handshake is not None:
        if handshake.info != info:
            # A caller's mistake: the client was told of another server.
            raise ValueError(
                f"the handshake answered {handshake.info!r:.300}, but this server is {info!r:.300}"
            )
        source.preread = handshake.unread
        if handshake.version is not None:  # initialize was answered: the handshake era
            connection.modern, connection.version = False, handshake.version
    if on_ready is not None:
        on_ready("stdio")
    try:
        async with anyio.create_task_group() as group:
            if watch is not None:
                group.start_soon(connection.watch_resources)
            if (
                threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            ):
                group.start_soon(_end_on_sigterm, group.cancel_scope)
            while (lines := await source.read_lines()) is not None:
                for line in lines:
                    if line.strip():
                        await connection.receive(line, group)
                # Back-pressure: a client that stops reading replies stops
                # being read, so what it makes the server hold stays bounded.
                await connection.out.room()
            group.cancel_scope.cancel()
    except* _ClientGone:
        pass  # the client stopped reading: it has gone, and so does the server


async def _end_on_sigterm(scope: anyio.CancelScope) -> None:
    """Cancel `scope` (the server: its calls, then the loop) when SIGTERM arrives."""
    with anyio.open_signal_receiver(signal.SIGTERM) as received:
        async for _ in received:
            scope.cancel()
            return
