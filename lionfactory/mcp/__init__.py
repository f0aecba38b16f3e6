"""MCP: serve lionfactory tools to MCP clients, and use MCP servers' tools as factories.

Needs the ``mcp`` extra (the official MCP Python SDK): ``pip install 'lionfactory[mcp]'``.

* `serve_mcp` serves a template Branch or factories over stdio or Streamable
  HTTP, one Branch per client session (`create_mcp_server` builds the
  low-level server for your own transport).
"""

try:
    import mcp as _sdk  # noqa: F401  # the SDK, imported first for a clear error
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lionfactory.mcp needs the MCP Python SDK: pip install 'lionfactory[mcp]'"
    ) from exc

from lionfactory.mcp._serve import SessionBranches, create_mcp_server, serve_mcp

__all__ = [
    "SessionBranches",
    "create_mcp_server",
    "serve_mcp",
]
