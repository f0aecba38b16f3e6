"""MCP: serve lionfactory tools to MCP clients, and use MCP servers' tools as factories.

Needs the ``mcp`` extra (the official MCP Python SDK): ``pip install 'lionfactory[mcp]'``.

* `serve_mcp` serves a template Branch or factories over stdio or Streamable
  HTTP, one Branch per client session (`create_mcp_server` builds the
  low-level server for your own transport); `SessionBranches` holds the
  sessions' branches and reports what each holds (`SessionStatus`).
* `McpServer` is a live connection to an MCP server; `mcp_tools` turns its
  tools into lionfactory Tools (`McpToolResponse` is their response).

The SDK is imported when a name that needs it is first used, not with this
package: importing any part of the SDK imports all of it, which takes most
of a second, and ``lionfactory mcp serve`` over stdio does not need it.
"""

from __future__ import annotations

import typing as _typing

from lionfactory._catalogue import lazy_exports as _lazy_exports
from lionfactory.mcp._serve import SessionBranches, SessionStatus, create_mcp_server, serve_mcp

if _typing.TYPE_CHECKING:
    from lionfactory.mcp._client import McpServer, McpToolResponse, mcp_tools, qualified_name

__all__ = [
    "McpServer",
    "McpToolResponse",
    "SessionBranches",
    "SessionStatus",
    "create_mcp_server",
    "mcp_tools",
    "qualified_name",
    "serve_mcp",
]

_FROM_CLIENT = dict.fromkeys(
    ("McpServer", "McpToolResponse", "mcp_tools", "qualified_name"), "lionfactory.mcp._client"
)


def _missing_sdk(exc: ImportError) -> ImportError | None:
    if exc.name is None or exc.name.split(".")[0] not in ("mcp", "mcp_types"):
        return None
    return ImportError("lionfactory.mcp needs the MCP Python SDK: pip install 'lionfactory[mcp]'")


__getattr__, __dir__ = _lazy_exports(
    __name__, _FROM_CLIENT, globals(), on_import_error=_missing_sdk
)
