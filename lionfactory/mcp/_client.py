"""Use an MCP server's tools as lionfactory Tools.

`McpServer` is a live connection: it owns an MCP client session (inside the
SDK's ``Client``, which runs its own task group) and caches the server's tool
list when it connects. Its lifetime is the caller's, and it is structured:
open it with ``async with`` in the task that uses it, and every Tool made
from it stops working (with a typed failure, not a crash) when the block
exits::

    async with McpServer.stdio(["lionfactory", "mcp", "serve"]) as server:
        branch.register(mcp_tools, server=server)
        clone = branch.clone()      # calls mcp_tools(server=server) again
        ...

`mcp_tools` is a plain sync factory (``Branch.register`` is sync), so it
reads the cached list rather than asking the server. Because the server is
a keyword argument, a clone shares the connection, and with it whatever the
*remote* server keeps per session: two branches that must not share remote
state (the lionfactory server's read-before-edit evidence, say) need two
`McpServer` connections.

Every connection failure raises one `McpConnectionError` naming the server
and the phase (``start``, ``initialize``, ``call``), with the real cause as
its ``__cause__``: the SDK runs task groups inside task groups, and a raw
failure reaches the caller as an exception group two levels deep. With a
`connect_timeout` (by default `timeout`), opening the connection (start,
handshake and tool list together) gets that long; then the SDK stops the
server as the MCP lifecycle asks: close its stdin, allow it two seconds to
exit, then terminate it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar
from urllib.parse import urlsplit

import anyio
import attrs
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lionfactory._tool import Tool
from lionfactory.errors import McpConnectionError, ToolInputError
from lionfactory.mcp._schema import RemoteRequest, request_model

__all__ = ["McpServer", "McpToolResponse", "mcp_tools", "qualified_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_NAME = 64
_MAX_PAGES = 100
_MAX_IMAGE_BASE64 = 4 * ((5 * 1024 * 1024 + 2) // 3)
"""The base64 length of the largest image passed on (5 MiB, the reader's own limit)."""


class McpResourceRef(BaseModel):
    """A resource a tool's result pointed to (``resource_link``) or carried (``resource``)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    kind: Literal["resource_link", "resource"] = Field(
        description="resource_link: a reference to read later; resource: its contents came along."
    )
    uri: str = Field(description="The resource's URI.")
    name: str | None = Field(default=None, description="The resource's name, for a link.")
    mime_type: str | None = Field(default=None, description="Its MIME type, when the server said.")
    text: str | None = Field(
        default=None, description="The embedded text contents (an embedded text resource only)."
    )
    size: int | None = Field(
        default=None, description="Bytes: a link's announced size, or an embedded blob's length."
    )


class McpToolResponse(BaseModel):
    """What a tool of an MCP server returned."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    success: bool = Field(description="False when the server reported the call as failed.")
    content: str = Field(
        description=(
            "The text the tool returned, as the server sent it; an image is a data URL "
            "(data:image/png;base64,...) on its own line, a resource link or embedded "
            "resource is named in brackets (an embedded text resource's text follows), "
            "other non-text parts are described in brackets."
        )
    )
    structured_content: Any = Field(
        default=None, description="The tool's structured result, when it sent one."
    )
    resources: list[McpResourceRef] = Field(
        default_factory=list,
        description="The resource links and embedded resources of the result, in order.",
    )
    error: str | None = Field(
        default=None, description="Why the call failed, when it did; read it before retrying."
    )


def _clean(part: str) -> str:
    return _UNSAFE.sub("_", part).strip("_") or "x"


def qualified_name(server: str, tool: str, *, prefix: str | None = None) -> str:
    """``mcp__<server>__<tool>`` (or ``<prefix><tool>``), at most 64 chars of ``[A-Za-z0-9_-]``.

    Other characters become ``_``. A name that would be longer keeps its start
    and ends with a short hash of the full name, so distinct tools stay distinct.
    """
    head = f"mcp__{_clean(server)}__" if prefix is None else _UNSAFE.sub("_", prefix)
    name = head + _clean(tool)
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{head}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def _default_name(target: str | StdioServerParameters) -> str:
    if isinstance(target, StdioServerParameters):
        return Path(target.command).name
    return urlsplit(target).hostname or "server"


@attrs.define(eq=False)
class McpServer:
    """A connection to one MCP server, with its tool list cached at connect time.

    Build it with `McpServer.stdio` or `McpServer.http`, then ``async with``
    it. Not re-entrant; one connection per ``async with``.

    Attributes:
        name: the name used in qualified tool names; by default the name the
            server reports, else the command's or host's name.
        mode: the SDK's protocol negotiation (``"auto"`` by default).
        errlog: where a stdio server's stderr goes.
        timeout: seconds to wait for each answer, or None.
        connect_timeout: seconds to start the server, initialize and list its
            tools, all together; None means `timeout`.
    """

    _target: str | StdioServerParameters = attrs.field(alias="target")
    name: str | None = None
    mode: str = "auto"
    errlog: TextIO | None = None
    timeout: float | None = None
    connect_timeout: float | None = None
    _client: Client | None = attrs.field(default=None, init=False)
    _stack: AsyncExitStack | None = attrs.field(default=None, init=False)
    _tools: tuple[types.Tool, ...] | None = attrs.field(default=None, init=False)

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        mode: str = "auto",
    ) -> McpServer:
        """A server started as a subprocess, spoken to over its stdin and stdout.

        Args:
            command: the program and its arguments.
            name: see the class attributes.
            env: variables added to the SDK's safe default environment.
            cwd: the working directory of the server process.
            errlog: where the server's stderr goes (default: ``sys.stderr``).
            timeout: seconds to wait for each answer (default: no limit); a
                call that times out returns a typed failure.
            connect_timeout: seconds to start, initialize and list the tools
                (default: `timeout`); past it, `McpConnectionError`.
            mode: the SDK's protocol negotiation: ``"auto"`` (ask with
                ``server/discover``, fall back to the handshake), ``"legacy"``
                (the 2025 handshake) or a pinned version such as ``"2026-07-28"``.

        Raises:
            ValueError: `command` is empty or a string, or `mode` is unknown.
        """
        if isinstance(command, str) or not command:
            raise ValueError(f"command must be a non-empty list of words, got {command!r}")
        _check_mode(mode)
        parameters = StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        return cls(
            target=parameters,
            name=name,
            mode=mode,
            errlog=errlog,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        name: str | None = None,
        mode: str = "auto",
        timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> McpServer:
        """A server reached over Streamable HTTP at `url` (``http(s)://host:port/mcp``).

        Args:
            url: the endpoint.
            name: see the class attributes.
            mode: the SDK's protocol negotiation: ``"auto"``, ``"legacy"``
                (the 2025 handshake) or a modern version such as ``"2026-07-28"``.
            timeout: seconds to wait for each answer (default: no limit).
            connect_timeout: seconds to initialize and list the tools
                (default: `timeout`); past it, `McpConnectionError`.

        Raises:
            ValueError: `url` is not an http(s) URL, or `mode` is unknown.
        """
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        _check_mode(mode)
        return cls(
            target=url, name=name, mode=mode, timeout=timeout, connect_timeout=connect_timeout
        )

    @property
    def connected(self) -> bool:
        """Whether the ``async with`` block is open."""
        return self._client is not None

    @property
    def tools(self) -> tuple[types.Tool, ...]:
        """The server's tools, as listed when the connection opened.

        Raises:
            RuntimeError: the server was never connected.
        """
        if self._tools is None:
            raise RuntimeError(
                "McpServer has not listed its tools yet; open it first: "
                "`async with McpServer.stdio([...]) as server: ...`"
            )
        return self._tools

    async def __aenter__(self) -> McpServer:
        if self._stack is not None:
            raise RuntimeError("this McpServer is already open; make a new one per connection")
        progress = _Progress()
        try:
            await self._connect(progress)
        except Exception as exc:
            cause = _leaf(exc)
            raise McpConnectionError(
                self._shown(), progress.phase, _reason(cause, progress.phase, self._limit)
            ) from cause
        except BaseExceptionGroup as group:
            # Only Exceptions inside (no Cancelled, no KeyboardInterrupt): a failure.
            if group.split(Exception)[1] is not None:
                raise
            cause = _leaf(group)
            raise McpConnectionError(
                self._shown(), progress.phase, _reason(cause, progress.phase, self._limit)
            ) from cause
        if self._stack is None:
            raise McpConnectionError(
                self._shown(),
                progress.phase,
                f"no answer within the timeout of {self._limit} s. Check that the command "
                f"starts an MCP server that speaks on stdout (its stderr went to errlog), or "
                f"give it a longer timeout.",
            )
        return self

    async def _connect(self, progress: _Progress) -> None:
        """Open the client and list the tools; leave `_stack` None if the deadline passed."""
        async with AsyncExitStack() as stack:
            # A scope that lives as long as the connection (the client's task
            # group opens inside it, so it must close after it): the deadline
            # bounds the opening, and is lifted once the tools are listed.
            limit = self._limit
            deadline = math.inf if limit is None else anyio.current_time() + limit
            scope = stack.enter_context(anyio.CancelScope(deadline=deadline))
            client = Client(
                _tracked(self._transport(), progress),
                mode=self.mode,
                read_timeout_seconds=self.timeout,
            )
            await stack.enter_async_context(client)
            tools: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            if self.name is None:
                info = client.server_info
                self.name = info.name if info is not None and info.name else None
            self.name = self.name or _default_name(self._target)
            scope.deadline = math.inf
            self._tools = tuple(tools)
            self._client = client
            self._stack = stack.pop_all()

    @property
    def _limit(self) -> float | None:
        return self.timeout if self.connect_timeout is None else self.connect_timeout

    def _shown(self) -> str:
        """The server's name, else what it was started with (for error texts)."""
        if self.name:
            return self.name
        if isinstance(self._target, StdioServerParameters):
            return " ".join([self._target.command, *self._target.args])[:200]
        return self._target

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        if isinstance(self._target, StdioServerParameters):
            return stdio_client(self._target, errlog=self.errlog or sys.stderr)
        # Imported here: the HTTP client stack is not needed for stdio servers.
        from mcp.client.streamable_http import streamable_http_client

        return streamable_http_client(self._target)

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Call the server's tool `name` (its own name, not the qualified one).

        Raises:
            RuntimeError: the connection is not open.
            McpConnectionError: the connection broke (phase ``"call"``).
            MCPError: the server answered with a protocol error.
        """
        client = self._open()
        return await self._guarded(client.call_tool(name, dict(arguments)))

    @property
    def protocol_version(self) -> str | None:
        """The protocol version the connection speaks (None while it is closed)."""
        client = self._client
        return None if client is None else client.protocol_version

    @property
    def has_resources(self) -> bool:
        """Whether the server said it serves resources (``resources/list``, ``resources/read``)."""
        client = self._client
        return client is not None and client.server_capabilities.resources is not None

    async def list_resources(self, cursor: str | None = None) -> types.ListResourcesResult:
        """One page of the server's resources.

        Raises:
            RuntimeError: the connection is not open.
            McpConnectionError: the connection broke (phase ``"call"``).
            MCPError: the server answered with a protocol error.
        """
        client = self._open()
        return await self._guarded(client.list_resources(cursor=cursor))

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """The contents of the server's resource `uri` (see `list_resources` for the errors)."""
        client = self._open()
        return await self._guarded(client.read_resource(uri))

    def _open(self) -> Client:
        client = self._client
        if client is None:
            raise RuntimeError(f"the connection to MCP server {self.name!r} is closed")
        return client

    async def _guarded(self, request: Awaitable[T]) -> T:
        try:
            return await request
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            raise McpConnectionError(self._shown(), "call", "the connection closed") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise McpConnectionError(
                self._shown(), "call", f"the connection broke ({type(exc).__name__})"
            ) from exc


T = TypeVar("T")
_MODES = ("auto", "legacy", *MODERN_PROTOCOL_VERSIONS)


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(
            f"mode must be one of {', '.join(repr(m) for m in _MODES)}, got {mode!r} "
            f"(a handshake-era version is negotiated with mode='legacy')"
        )


@attrs.define
class _Progress:
    """How far opening a connection got: ``start`` until the transport is up."""

    phase: str = "start"


@asynccontextmanager
async def _tracked(
    transport: AbstractAsyncContextManager[Any], progress: _Progress
) -> AsyncIterator[Any]:
    """`transport`, noting when it is up (the program runs; the handshake begins)."""
    async with transport as streams:
        progress.phase = "initialize"
        yield streams


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(cause: BaseException, phase: str, timeout: float | None) -> str:
    """What a connection failure means, in words, from its underlying exception."""
    if isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED:
        return (
            "the server closed the connection before answering; the program may have exited "
            "at once (its stderr went to errlog) or may not be an MCP server."
        )
    if isinstance(cause, MCPError) and cause.code == REQUEST_TIMEOUT:
        return f"no answer within the timeout of {timeout} s ({cause.message})."
    if phase == "start" and isinstance(cause, OSError):
        return f"the program could not be started ({type(cause).__name__}: {cause})."
    return f"{type(cause).__name__}: {cause}"


def _text(result: types.CallToolResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent) and len(block.data) <= _MAX_IMAGE_BASE64:
            # The shape the coding toolkit's reader gives an image: a data URL
            # a vision model (or an adapter) can take as an image.
            parts.append(f"data:{block.mime_type};base64,{block.data}")
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, types.ResourceLink):
            mime = f", {block.mime_type}" if block.mime_type else ""
            parts.append(f"[resource_link: {block.uri} ({block.name}{mime})]")
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            mime = f", {inner.mime_type}" if inner.mime_type else ""
            if isinstance(inner, types.TextResourceContents):
                parts.append(f"[resource: {inner.uri}{mime}]\n{inner.text}")
            else:
                parts.append(f"[resource: {inner.uri}{mime}, {len(inner.blob) * 3 // 4} bytes]")
        else:
            parts.append(f"[{block.type}]")
    return "\n".join(parts)


def _resources(result: types.CallToolResult) -> list[McpResourceRef]:
    """The result's resource links and embedded resources, kept as data beside the text."""
    found = []
    for block in result.content:
        if isinstance(block, types.ResourceLink):
            found.append(
                McpResourceRef(
                    kind="resource_link",
                    uri=str(block.uri),
                    name=block.name,
                    mime_type=block.mime_type,
                    size=block.size,
                )
            )
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            text = inner.text if isinstance(inner, types.TextResourceContents) else None
            size = None if text is not None else len(getattr(inner, "blob", "")) * 3 // 4
            found.append(
                McpResourceRef(
                    kind="resource",
                    uri=str(inner.uri),
                    mime_type=inner.mime_type,
                    text=text,
                    size=size,
                )
            )
    return found


def _repeats(text: str, structured: Any) -> bool:
    """Whether `text` is only the JSON form of `structured` (the spec asks servers to send both)."""
    if structured is None:
        return False
    try:
        return bool(json.loads(text) == structured)
    except ValueError:
        return False


def _response(result: types.CallToolResult) -> McpToolResponse:
    # The text is kept even when it repeats structuredContent: it is what the
    # server meant a model to read (and what a text-only consumer prints).
    text = _text(result)
    structured = result.structured_content
    resources = _resources(result)
    if not result.is_error:
        return McpToolResponse(
            success=True, content=text, structured_content=structured, resources=resources
        )
    # The error is the words: the structured result's own error text when the
    # text only repeats the structured result, else the text.
    error = "" if _repeats(text, structured) else text
    if not error and isinstance(structured, Mapping) and isinstance(structured.get("error"), str):
        error = structured["error"]
    return McpToolResponse(
        success=False,
        content=text,
        structured_content=structured,
        resources=resources,
        error=error or "The tool reported a failure; see structured_content.",
    )


@attrs.frozen
class _RemoteCall:
    """The handler of one remote tool: send the arguments, translate the answer."""

    server: McpServer
    remote_name: str
    local_name: str

    def _unreachable(self, why: str) -> McpToolResponse:
        return McpToolResponse(
            success=False,
            content="",
            error=f"The MCP server {self.server.name!r} cannot be reached ({why}). "
            f"Do not retry this tool; continue without it.",
        )

    async def __call__(self, request: RemoteRequest) -> McpToolResponse:
        if not self.server.connected:
            return self._unreachable("its connection is closed")
        try:
            result = await self.server.call_tool(self.remote_name, request.arguments())
        except McpConnectionError as exc:
            return self._unreachable(exc.reason)
        except MCPError as exc:
            if exc.code == INVALID_PARAMS:
                raise ToolInputError(self.local_name, exc.message) from exc
            if exc.code == REQUEST_TIMEOUT:
                return McpToolResponse(
                    success=False,
                    content="",
                    error=f"The MCP server {self.server.name!r} did not answer in time "
                    f"({self.server.timeout} s). Retry once, or continue without this tool.",
                )
            return McpToolResponse(
                success=False,
                content="",
                error=f"The MCP server {self.server.name!r} answered with error {exc.code}: "
                f"{exc.message}",
            )
        return _response(result)


_MAX_RESOURCE_TEXT = 200_000
"""Characters of one resource's text passed on to a model; the rest is cut (and said so)."""


class McpResourcesRequest(BaseModel):
    """List or read the resources of an MCP server."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    action: Literal["list", "read"] = Field(
        description="list: one page of the server's resources; read: one resource's contents."
    )
    uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=8192,
        description="The resource to read (a uri from list); required for read.",
    )
    cursor: str | None = Field(
        default=None,
        max_length=8192,
        description="For list: the next_cursor of the previous page, to continue.",
    )

    @model_validator(mode="after")
    def _read_needs_a_uri(self) -> McpResourcesRequest:
        if self.action == "read" and self.uri is None:
            raise ValueError("action 'read' needs the uri of a resource (list them first)")
        return self


class McpResourceEntry(BaseModel):
    """One resource the server lists, or one part of a resource read."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    uri: str = Field(description="The resource's URI (pass it to read).")
    name: str | None = Field(default=None, description="Its name, when listed.")
    mime_type: str | None = Field(default=None, description="Its MIME type, when known.")
    description: str | None = Field(default=None, description="What it is, when the server said.")
    size: int | None = Field(default=None, description="Bytes, when known.")
    text: str | None = Field(default=None, description="Its text (read, text resources only).")
    truncated: bool = Field(default=False, description="True when the text was cut.")


class McpResourcesResponse(BaseModel):
    """What the server's resources tool returned."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    success: bool = Field(description="False when the server refused or could not be reached.")
    resources: list[McpResourceEntry] = Field(
        default_factory=list, description="list: the resources; read: the contents' parts."
    )
    next_cursor: str | None = Field(
        default=None, description="list: pass it as cursor for the next page; None at the end."
    )
    error: str | None = Field(default=None, description="Why it failed, when it did.")


@attrs.frozen
class _ResourcesCall:
    """The handler of a server's resources tool: list or read, nothing else."""

    server: McpServer

    async def __call__(self, request: McpResourcesRequest) -> McpResourcesResponse:
        if not self.server.connected:
            return McpResourcesResponse(
                success=False,
                error=f"The MCP server {self.server.name!r} cannot be reached (its connection "
                f"is closed). Continue without its resources.",
            )
        try:
            if request.action == "list":
                return await self._list(request.cursor)
            assert request.uri is not None  # the request model requires it for read
            return await self._read(request.uri)
        except McpConnectionError as exc:
            return McpResourcesResponse(success=False, error=exc.reason)
        except MCPError as exc:
            return McpResourcesResponse(
                success=False,
                error=f"The MCP server {self.server.name!r} refused it (error {exc.code}): "
                f"{exc.message}. List the resources to find a valid uri.",
            )

    async def _list(self, cursor: str | None) -> McpResourcesResponse:
        page = await self.server.list_resources(cursor)
        entries = [
            McpResourceEntry(
                uri=str(r.uri),
                name=r.name,
                mime_type=r.mime_type,
                description=r.description,
                size=r.size,
            )
            for r in page.resources
        ]
        return McpResourcesResponse(success=True, resources=entries, next_cursor=page.next_cursor)

    async def _read(self, uri: str) -> McpResourcesResponse:
        result = await self.server.read_resource(uri)
        entries = []
        for part in result.contents:
            if isinstance(part, types.TextResourceContents):
                cut = len(part.text) > _MAX_RESOURCE_TEXT
                entries.append(
                    McpResourceEntry(
                        uri=str(part.uri),
                        mime_type=part.mime_type,
                        size=len(part.text.encode("utf-8", "surrogatepass")),
                        text=part.text[:_MAX_RESOURCE_TEXT],
                        truncated=cut,
                    )
                )
            else:
                # A blob is not passed to a model as base64: its size says what it is.
                entries.append(
                    McpResourceEntry(
                        uri=str(part.uri), mime_type=part.mime_type, size=len(part.blob) * 3 // 4
                    )
                )
        return McpResourcesResponse(success=True, resources=entries)


def mcp_tools(
    server: McpServer,
    *,
    include: Iterable[str] | None = None,
    prefix: str | None = None,
    resources: bool = False,
) -> list[Tool]:
    """Tools that call an MCP server's tools, built from its cached tool list.

    Register it like any factory: ``branch.register(mcp_tools, server=server)``;
    clones call it again with the same (shared) connection.

    Args:
        server: an open `McpServer`.
        include: the server's tool names to keep (default: all of them).
        prefix: replaces ``mcp__<server>__`` in front of each tool's name.
        resources: also give the branch one read-only tool, named like a
            remote tool called ``resources``, that lists the server's
            resources and reads one (text passed on, a blob described by
            its size). Off by default: what a server exposes as resources
            is more than the tools it chose to offer.

    Returns:
        One Tool per remote tool, named by `qualified_name`, whose request
        model is built from the server's input schema and whose response is
        an `McpToolResponse`. Tools are not bound to a branch.

    Raises:
        TypeError: `server` is not an `McpServer`.
        RuntimeError: the server has not been opened.
        ValueError: `include` names a tool the server does not have, or
            `resources` for a server that serves none (or whose tool list
            already has the resources tool's name).
    """
    if not isinstance(server, McpServer):
        raise TypeError(f"server must be an McpServer, got {server!r:.200}")
    listed = {tool.name: tool for tool in server.tools}
    if isinstance(include, str):
        raise TypeError(f"include must be a list of tool names, got the string {include!r}")
    wanted = list(listed) if include is None else list(include)
    unknown = [name for name in wanted if name not in listed]
    if unknown:
        raise ValueError(
            f"MCP server {server.name!r} has no tool(s) {unknown}; it has: {', '.join(listed)}"
        )
    server_name = server.name or "server"
    tools = []
    for remote in wanted:
        spec = listed[remote]
        local = qualified_name(server_name, remote, prefix=prefix)
        description = spec.description or f"The {remote!r} tool of MCP server {server_name!r}."
        tools.append(
            Tool(
                name=local,
                description=description,
                request_model=request_model(f"{_clean(local)}_request", spec.input_schema),
                handler=_RemoteCall(server=server, remote_name=remote, local_name=local),
            )
        )
    if resources:
        tools.append(_resources_tool(server, server_name, prefix, {t.name for t in tools}))
    return tools


def _resources_tool(
    server: McpServer, server_name: str, prefix: str | None, taken: set[str]
) -> Tool:
    if not server.has_resources:
        raise ValueError(
            f"MCP server {server_name!r} serves no resources (its capabilities have none); "
            f"register mcp_tools without resources=True"
        )
    local = qualified_name(server_name, "resources", prefix=prefix)
    if local in taken:
        raise ValueError(
            f"the resources tool's name {local!r} is taken by one of the server's tools; "
            f"leave that tool out with include=[...]"
        )
    return Tool(
        name=local,
        description=(
            f"List the resources of MCP server {server_name!r} (action 'list', paged with "
            f"cursor) or read one by its uri (action 'read'). Read-only."
        ),
        request_model=McpResourcesRequest,
        handler=_ResourcesCall(server=server),
    )
