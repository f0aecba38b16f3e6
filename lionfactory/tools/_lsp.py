"""A small language-server client: JSON-RPC 2.0 over a child's stdio, Content-Length framed.

The client reads only when a caller waits for something (a response, a
diagnostics report); there is no reader task. Under structured concurrency a
task that outlived the call that started it would need a nursery that lives
as long as the server, which no tool call owns. Reading on demand keeps
every task inside the call that needs the answer: whichever caller holds the
read lock parses every message that arrives, files responses by id for
their callers, keeps the latest ``textDocument/publishDiagnostics`` per
document (with its version) and answers the server's own requests. A server
that writes while nobody reads just waits on its pipe.

Positions are converted between the protocol's UTF-16 code units and Python
characters here (`utf16_column`, `char_column`), so no caller counts units.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from typing import Any

import anyio
import attrs

__all__ = [
    "MAX_MESSAGE_BYTES",
    "LspClient",
    "LspError",
    "char_column",
    "utf16_column",
]

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""The largest message read; a longer one (or a broken header) ends the connection."""

_MAX_HEADER_BYTES = 8192
_READ_CHUNK = 256 * 1024


class LspError(Exception):
    """The server cannot answer: it exited, broke the framing, timed out or returned an error."""


def utf16_column(line: str, chars: int) -> int:
    """The UTF-16 code-unit offset of character offset `chars` in `line`."""
    head = line[:chars]
    return len(head) + sum(1 for ch in head if ord(ch) > 0xFFFF)


def char_column(line: str, units: int) -> int:
    """The character offset of UTF-16 offset `units` in `line` (clamped to the line).

    An offset inside a surrogate pair (a server's bug) lands after the character.
    """
    count = 0
    for index, ch in enumerate(line):
        if count >= units:
            return index
        count += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


@attrs.frozen
class Published:
    """The latest diagnostics the server published for one document."""

    version: int | None
    diagnostics: list[dict[str, Any]]
    seq: int
    """Arrival order across all documents (a later report has a larger number)."""


def _answer(method: str, params: Any) -> tuple[Any, dict[str, Any] | None]:
    """(result, error) for a request the server sends the client."""
    if method == "workspace/configuration":
        items = params.get("items", []) if isinstance(params, dict) else []
        return [None] * len(items), None
    if method in (
        "client/registerCapability",
        "client/unregisterCapability",
        "window/workDoneProgress/create",
        "workspace/diagnostic/refresh",
        "workspace/semanticTokens/refresh",
        "workspace/inlayHint/refresh",
        "window/showMessageRequest",
    ):
        return None, None
    return None, {"code": -32601, "message": f"method not supported by this client: {method}"}


@attrs.define(eq=False)
class LspClient:
    """JSON-RPC over two non-blocking descriptors: `write_fd` to the server, `read_fd` from it.

    The descriptors belong to the caller (`close` closes them).
    """

    write_fd: int
    read_fd: int
    published: dict[str, Published] = attrs.field(factory=dict)
    _buffer: bytearray = attrs.field(factory=bytearray)
    _responses: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    _next_id: int = 1
    _seq: int = 0
    _read_lock: anyio.Lock = attrs.field(factory=anyio.Lock)
    _write_lock: anyio.Lock = attrs.field(factory=anyio.Lock)
    _gone: str | None = None
    _pending_replies: list[bytes] = attrs.field(factory=list)
    _abandoned: set[int] = attrs.field(factory=set)

    @property
    def gone(self) -> str | None:
        """Why the connection ended, or None while it works."""
        return self._gone

    # -- writing -------------------------------------------------------------

    @staticmethod
    def frame(message: dict[str, Any]) -> bytes:
        """`message` as one Content-Length framed JSON-RPC message."""
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    def write_now(self, message: dict[str, Any]) -> None:
        """Write `message` without waiting (a fresh pipe holds 64 KiB: used to warm a server).

        Raises:
            LspError: the pipe is full or closed.
        """
        data = self.frame(message)
        try:
            written = os.write(self.write_fd, data)
        except OSError as exc:
            raise LspError(f"cannot write to the language server ({exc.strerror})") from None
        if written != len(data):
            raise LspError("the language server's input pipe is full")

    async def _write(self, data: bytes) -> None:
        async with self._write_lock:
            view = memoryview(data)
            while view:
                if self._gone is not None:
                    raise LspError(self._gone)
                try:
                    written = os.write(self.write_fd, view)
                except BlockingIOError:
                    await anyio.wait_writable(self.write_fd)
                    continue
                except OSError as exc:
                    self._gone = f"the language server stopped reading ({exc.strerror})"
                    raise LspError(self._gone) from None
                view = view[written:]

    async def notify(self, method: str, params: Any) -> None:
        """Send notification `method`."""
        await self._write(self.frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def next_id(self) -> int:
        """A request id not used before on this connection."""
        value = self._next_id
        self._next_id += 1
        return value

    async def send_request(self, method: str, params: Any, request_id: int | None = None) -> int:
        """Send request `method`; its id (for `response`)."""
        rid = self.next_id() if request_id is None else request_id
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        await self._write(self.frame(message))
        return rid

    async def request(self, method: str, params: Any, *, timeout: float) -> Any:
        """Send request `method` and wait at most `timeout` seconds for its result.

        Raises:
            LspError: no answer in time, the server's error answer, or the connection ended.
        """
        rid = await self.send_request(method, params)
        return await self.response(rid, timeout=timeout, method=method)

    async def response(self, rid: int, *, timeout: float, method: str = "request") -> Any:
        """The result of request `rid`, waited for at most `timeout` seconds."""
        arrived = await self.pump(lambda: rid in self._responses, timeout=timeout)
        if not arrived:
            if self._gone is not None:
                raise LspError(self._gone)
            # Tell the server to drop the work; its late answer is discarded.
            self._abandoned.add(rid)
            await self.notify("$/cancelRequest", {"id": rid})
            raise LspError(f"the language server did not answer {method} within {timeout:g} s")
        message = self._responses.pop(rid)
        error = message.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, dict) else error
            raise LspError(f"the language server refused {method}: {str(text)[:500]}")
        return message.get("result")

    # -- reading -------------------------------------------------------------

    async def pump(self, done: Callable[[], bool], *, timeout: float) -> bool:
        """Read and file messages until `done()` holds or `timeout` passes; whether it holds."""
        if done():
            # Already there (an edit's errors before it, say): no cancel scope to set up.
            return True
        with anyio.move_on_after(timeout):
            while not done():
                if self._gone is not None:
                    return False
                async with self._read_lock:
                    # Another caller may have read what we wait for meanwhile.
                    if done():
                        break
                    await self._read_some()
                await self._flush_replies()
        return done()

    async def poll(self) -> None:
        """File whatever has arrived already, without waiting for more."""
        if self._gone is not None or self._read_lock.locked():
            return
        async with self._read_lock:
            while self._gone is None and self._read_available():
                pass
        await self._flush_replies()

    async def _flush_replies(self) -> None:
        while self._pending_replies and self._gone is None:
            data = self._pending_replies.pop(0)
            try:
                await self._write(data)
            except LspError:
                return

    def _read_available(self) -> bool:
        """One non-blocking read into the buffer, then parse; whether bytes came."""
        try:
            chunk = os.read(self.read_fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return True
            self._gone = f"the language server's output failed ({exc.strerror})"
            return False
        if not chunk:
            self._gone = "the language server exited"
            return False
        self._buffer += chunk
        self._parse()
        return True

    async def _read_some(self) -> None:
        if not self._read_available() and self._gone is None:
            await anyio.wait_readable(self.read_fd)
            self._read_available()

    def _parse(self) -> None:
        while self._gone is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEADER_BYTES:
                    self._gone = "the language server sent a malformed header"
                return
            length = None
            for line in bytes(self._buffer[:end]).split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        length = None
            if length is None or length < 0 or length > MAX_MESSAGE_BYTES:
                self._gone = (
                    f"the language server sent a message without a usable length "
                    f"(at most {MAX_MESSAGE_BYTES:,} bytes)"
                )
                return
            start = end + 4
            if len(self._buffer) < start + length:
                return
            body = bytes(self._buffer[start : start + length])
            del self._buffer[: start + length]
            try:
                message = json.loads(body)
            except ValueError:
                continue  # one unreadable message; the framing still holds
            if isinstance(message, dict):
                self._dispatch(message)

    def record(self, uri: str, version: int | None, diagnostics: list[dict[str, Any]]) -> None:
        """Keep `diagnostics` as the latest of `uri` (an answer to a request for them)."""
        self._seq += 1
        self.published[uri] = Published(version=version, diagnostics=diagnostics, seq=self._seq)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if isinstance(method, str) and "id" in message:
            result, error = _answer(method, message.get("params"))
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
            reply.update({"error": error} if error is not None else {"result": result})
            self._pending_replies.append(self.frame(reply))
        elif method == "textDocument/publishDiagnostics":
            params = message.get("params")
            if isinstance(params, dict) and isinstance(params.get("uri"), str):
                diagnostics = params.get("diagnostics")
                version = params.get("version")
                version = version if isinstance(version, int) else None
                known = self.published.get(params["uri"])
                if (
                    known is not None
                    and known.version is not None
                    and version is not None
                    and version < known.version
                ):
                    return  # a report for an older text, arriving out of order
                self._seq += 1
                self.published[params["uri"]] = Published(
                    version=version,
                    diagnostics=[d for d in diagnostics if isinstance(d, dict)]
                    if isinstance(diagnostics, list)
                    else [],
                    seq=self._seq,
                )
        elif method is None and isinstance(message.get("id"), int):
            if message["id"] in self._abandoned:
                self._abandoned.discard(message["id"])
            else:
                self._responses[message["id"]] = message
        # Other notifications (logs, progress) carry nothing a caller waits for.
