"""The workspace's files as MCP resources: ``resources/list``, ``resources/read``, templates.

A client (an IDE, an agent SDK, the MCP Inspector) can show a user the
project's files and attach one to a conversation without a tool call. What
is listed is what the tools call project content: the one project matcher
(`lionfactory._os.project.ProjectView`, git's and ripgrep's ignore rules), so
``.git``, protected names (``.env``, keys) and ignored paths (a ``.venv``
the ``.gitignore`` names) are never listed; symbolic links are neither
listed nor followed. What is read goes through the workspace seam
(`lionfactory._os.workspace.Workspace.locate`): opened beneath the root,
following no link, regular files only, private keys and protected names
refused, ``.git`` internals refused, and capped in size.

* ``resources/list`` is paginated. The cursor is the last path of the page:
  the listing is in depth-first name order, which is the order of the
  paths' component tuples, so the next page starts after that path even
  when files appeared or vanished in between, and whole subtrees before it
  are not walked again.
* ``resources/read`` returns text (UTF-8 without NUL bytes) with a MIME type,
  anything else as a base64 ``blob``, both up to `MAX_READ_BYTES`.
* ``resources/templates/list`` offers ``file:///ROOT/{+path}``, so a client
  can read a path it did not list (an ignored file, say), under the same
  rules.

This module speaks plain JSON-ready dicts, so lionfactory's own stdio server
(which never imports the SDK) and the SDK's server share it.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import anyio.to_thread
import attrs

from lionfactory._os.project import ProjectView
from lionfactory._os.regular import FileRefused, regular_stat
from lionfactory._os.workspace import PathRefused, Workspace
from lionfactory.mcp._protocol import resource_capability

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

__all__ = [
    "MAX_READ_BYTES",
    "ResourceWatch",
    "PAGE_SIZE",
    "RESOURCE_NOT_FOUND",
    "ResourceError",
    "WorkspaceResources",
    "attach_resources",
]

PAGE_SIZE = 200
"""Resources per ``resources/list`` page."""
MAX_READ_BYTES = 4 * 1024 * 1024
"""The largest file ``resources/read`` returns (text or blob)."""
RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error the MCP specification gives a resource that does not exist."""
INVALID_PARAMS = -32602


class ResourceError(Exception):
    """A ``resources/*`` request that cannot be answered: a JSON-RPC error code and its text."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _mime_type(name: str, *, text: bool) -> str:
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is not None:
        return guessed
    return "text/plain" if text else "application/octet-stream"


def _after(parts: tuple[str, ...], cursor: tuple[str, ...]) -> bool:
    return parts > cursor


@attrs.define(eq=False)
class WorkspaceResources:
    """The files of one workspace, served as ``file://`` resources.

    Args:
        workspace: the workspace (root and protected names).
        page_size: resources per ``resources/list`` page.
        max_read_bytes: the largest file ``resources/read`` returns.
        global_file: git's global excludes file, applied as the tools apply it.
    """

    workspace: Workspace
    page_size: int = PAGE_SIZE
    max_read_bytes: int = MAX_READ_BYTES
    global_file: Path | None = None

    @classmethod
    def at(cls, root: str | os.PathLike[str], **options: Any) -> WorkspaceResources:
        """Serve the workspace at `root` (with the default protected names)."""
        return cls(Workspace.at(root), **options)

    def capabilities(self, *, watched: bool = False) -> dict[str, Any]:
        """The ``resources`` server capability (`watched`: a `ResourceWatch` serves it)."""
        return resource_capability(watched=watched)

    def uri(self, relative: str) -> str:
        """The ``file://`` URI of a root-relative path."""
        return self.workspace.root.joinpath(*relative.split("/")).as_uri()

    # -- resources/list --------------------------------------------------------

    async def list(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A ``resources/list`` result for `params` (its ``cursor``)."""
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ResourceError(INVALID_PARAMS, "the cursor is the nextCursor of a previous page")
        return await anyio.to_thread.run_sync(self._page, cursor)

    def _page(self, cursor: str | None) -> dict[str, Any]:
        after = tuple(cursor.split("/")) if cursor else ()
        view = ProjectView(self.workspace, global_file=self.global_file)

        def skip(relative: str, is_dir: bool) -> bool:
            parts = tuple(relative.split("/"))
            # Before the cursor: a file already listed, or a directory whose
            # whole subtree was (it is entered when the cursor lies inside it).
            if after and not _after(parts, after) and not (is_dir and after[: len(parts)] == parts):
                return True
            return view.skips(relative, is_dir)

        resources: list[dict[str, Any]] = []
        top = self.workspace.locate(".")
        more = False
        for relative, is_dir in self.workspace.entries(top, recursive=True, skip=skip):
            if is_dir:
                continue
            if len(resources) == self.page_size:
                more = True
                break
            name = relative.rsplit("/", 1)[-1]
            resources.append(
                {
                    "uri": self.uri(relative),
                    "name": relative,
                    "title": name,
                    "mimeType": _mime_type(name, text=True),
                }
            )
        result: dict[str, Any] = {"resources": resources}
        if more:
            result["nextCursor"] = resources[-1]["name"]
        return result

    # -- resources/templates/list ------------------------------------------------

    def templates(self) -> dict[str, Any]:
        """A ``resources/templates/list`` result: one template for any path in the workspace."""
        root = self.workspace.root.as_uri()
        return {
            "resourceTemplates": [
                {
                    "uriTemplate": root + "/{+path}",
                    "name": "workspace file",
                    "title": "A file of the workspace",
                    "description": (
                        f"Any file under {self.workspace.root}, by its path relative to it. "
                        f"Protected names and .git internals are refused; files over "
                        f"{self.max_read_bytes:,} bytes are refused (use the reader tool)."
                    ),
                }
            ]
        }

    # -- resources/read ----------------------------------------------------------

    async def read(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A ``resources/read`` result for `params` (its ``uri``)."""
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ResourceError(INVALID_PARAMS, "resources/read needs the resource's uri")
        return await anyio.to_thread.run_sync(self._read, uri)

    def _relative(self, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            raise ResourceError(
                RESOURCE_NOT_FOUND, f"not a resource of this server: {uri!r:.300} (file:// only)"
            )
        path = Path(unquote(parts.path))
        if not path.is_absolute() or not self.workspace.contains(Path(os.path.normpath(path))):
            raise ResourceError(
                RESOURCE_NOT_FOUND, f"{uri!r:.300} is outside the workspace {self.workspace.root}"
            )
        return self.workspace.relative(Path(os.path.normpath(path)))

    def _read(self, uri: str) -> dict[str, Any]:
        relative = self._relative(uri)
        try:
            location = self.workspace.locate(relative)
            if location.in_git_dir or not location.parts:
                raise PathRefused(relative, f"{relative!r} is not a file resource of the workspace")
            # No link followed: a resource is a file `resources/list` shows,
            # and listings never show links.
            fd = location.open_read(follow=False)
        except PathRefused as exc:
            raise ResourceError(RESOURCE_NOT_FOUND, str(exc)) from None
        except OSError as exc:
            raise ResourceError(
                RESOURCE_NOT_FOUND, f"cannot read {relative!r}: {os.strerror(exc.errno or 0)}"
            ) from None
        try:
            try:
                info = regular_stat(fd, relative)
            except FileRefused as exc:
                raise ResourceError(RESOURCE_NOT_FOUND, exc.message) from None
            if info.st_size > self.max_read_bytes:
                raise ResourceError(
                    INVALID_PARAMS,
                    f"{relative!r} has {info.st_size:,} bytes, over the {self.max_read_bytes:,} "
                    f"a resource read returns; read parts of it with the reader tool",
                )
            data = _read_at_most(fd, self.max_read_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.max_read_bytes:  # it grew while being read
            raise ResourceError(INVALID_PARAMS, f"{relative!r} grew past the read cap; try again")
        name = location.name
        content: dict[str, Any] = {"uri": self.uri(relative)}
        text = _as_text(data)
        if text is not None:
            content |= {"mimeType": _mime_type(name, text=True), "text": text}
        else:
            blob = base64.b64encode(data).decode("ascii")
            content |= {"mimeType": _mime_type(name, text=False), "blob": blob}
        return {"contents": [content]}

    # -- what a watch polls ------------------------------------------------------

    def signature(self, uri: str) -> tuple[int, int, int] | None:
        """The (inode, mtime_ns, size) stamp of the file at `uri`, or None when unreadable.

        Raises:
            ResourceError: `uri` is not a resource of this workspace.
        """
        relative = self._relative(uri)
        try:
            location = self.workspace.locate(relative)
            fd = location.open(os.O_RDONLY | os.O_NONBLOCK)
        except (PathRefused, OSError):
            return None
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def listing_digest(self) -> str:
        """A digest of the whole listing: it changes when a listed file appears or goes."""
        digest = hashlib.sha256()
        view = ProjectView(self.workspace, global_file=self.global_file)
        top = self.workspace.locate(".")
        for relative, is_dir in self.workspace.entries(top, recursive=True, skip=view.skips):
            if not is_dir:
                digest.update(relative.encode("utf-8", "surrogateescape") + b"\0")
        return digest.hexdigest()


@attrs.define(eq=False)
class ResourceWatch:
    """One connection's subscriptions, and the poll that notices changes.

    There is no portable, unprivileged way to be told about every change in a
    tree (inotify needs a watch per directory and has a per-user limit), so
    the watch polls: the subscribed files' stamps (taken when subscribed)
    each `interval`, and, once the client has listed the resources, the
    whole listing at most every `interval` and at least 50 times as long as
    the last walk took, so a large tree costs at most 2% of a core.

    Args:
        resources: the served workspace.
        interval: seconds between polls.
    """

    resources: WorkspaceResources
    interval: float = 1.0
    _subscribed: dict[str, tuple[int, int, int] | None] = attrs.field(factory=dict)
    _listing: str | None = None
    _next_listing: float = 0.0

    def subscribe(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A ``resources/subscribe`` result; the file's changes are reported from now on."""
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ResourceError(INVALID_PARAMS, "resources/subscribe needs the resource's uri")
        self._subscribed[uri] = self.resources.signature(uri)
        return {}

    def unsubscribe(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A ``resources/unsubscribe`` result."""
        uri = params.get("uri")
        if isinstance(uri, str):
            self._subscribed.pop(uri, None)
        return {}

    async def changes(self) -> tuple[list[str], bool]:
        """Wait one interval; the subscribed URIs that changed, and whether the listing did."""
        await anyio.sleep(self.interval)
        if not self._subscribed and self._listing is None:
            # Nothing to look at (most sessions never subscribe): no worker
            # thread is started once a second for it.
            return [], False
        # Abandoned on cancellation: a walk of a large tree must not delay shutdown.
        return await anyio.to_thread.run_sync(self._poll, abandon_on_cancel=True)

    def _poll(self) -> tuple[list[str], bool]:
        updated = []
        for uri, before in list(self._subscribed.items()):
            now = self.resources.signature(uri)
            if now != before:
                self._subscribed[uri] = now
                updated.append(uri)
        listed = False
        clock = time.monotonic()
        # The listing is watched once the client has seen it: until then it
        # has no list that could change, and no tree is walked for nothing.
        if self._listing is not None and clock >= self._next_listing:
            seen = self._listing
            self.take_listing()
            listed = self._listing != seen
        return updated, listed

    def take_listing(self) -> None:
        """Remember the listing as the client saw it (blocking: run it in a worker thread)."""
        clock = time.monotonic()
        self._listing = self.resources.listing_digest()
        self._next_listing = clock + max(self.interval, 50 * (time.monotonic() - clock))


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _as_text(data: bytes) -> str | None:
    """The bytes as text when they are UTF-8 without NUL bytes (what a text file is), else None."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def attach_resources(server: Server[Any], resources: WorkspaceResources) -> None:
    """Serve `resources` from an SDK low-level server (HTTP, in-process clients)."""
    from mcp import types
    from mcp.shared.exceptions import MCPError

    async def answer(work: Any, result_type: Any) -> Any:
        try:
            return result_type.model_validate(await work)
        except ResourceError as exc:
            raise MCPError(exc.code, exc.message) from None

    async def list_resources(ctx: Any, params: types.PaginatedRequestParams) -> Any:
        return await answer(resources.list({"cursor": params.cursor}), types.ListResourcesResult)

    async def list_templates(ctx: Any, params: types.PaginatedRequestParams) -> Any:
        return types.ListResourceTemplatesResult.model_validate(resources.templates())

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        return await answer(resources.read({"uri": str(params.uri)}), types.ReadResourceResult)

    server.add_request_handler("resources/list", types.PaginatedRequestParams, list_resources)
    server.add_request_handler(
        "resources/templates/list", types.PaginatedRequestParams, list_templates
    )
    server.add_request_handler("resources/read", types.ReadResourceRequestParams, read_resource)
