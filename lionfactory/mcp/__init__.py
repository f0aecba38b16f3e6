"""MCP: serve lionfactory tools to MCP clients, and use MCP servers' tools as factories.

Needs the ``mcp`` extra (the official MCP Python SDK): ``pip install 'lionfactory[mcp]'``.

* `serve_mcp` serves a template Branch or factories over stdio or Streamable
  HTTP, one Branch per client session (`create_mcp_server` builds the
  low-level server for your own transport).
* `McpServer` is a live connection to an MCP server; `mcp_tools` turns its
  tools into lionfactory Tools (`McpToolResponse` is their response).
"""

try:
    import mcp as _sdk  # noqa: F401  # the SDK, imported first for a clear error
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lionfactory.mcp needs the MCP Python SDK: pip install 'lionfactory[mcp]'"
    ) from exc

from lionfactory.mcp._client import McpServer, McpToolResponse, mcp_tools, qualified_name
from lionfactory.mcp._serve import SessionBranches, create_mcp_server, serve_mcp

__all__ = [
    "McpServer",
    "McpToolResponse",
    "SessionBranches",
    "create_mcp_server",
    "mcp_tools",
    "qualified_name",
    "serve_mcp",
]
