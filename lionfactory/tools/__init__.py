"""The built-in tool factories. Each lives in its own module; this package re-exports them."""

from lionfactory.tools.bash import BashRequest, BashResponse, bash_tool

__all__ = [
    "BashRequest",
    "BashResponse",
    "bash_tool",
]
