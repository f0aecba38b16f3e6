"""The built-in tool factories. Each lives in its own module; this package re-exports them."""

from lionfactory.tools.bash import BashRequest, BashResponse, bash_tool
from lionfactory.tools.reader import ReaderRequest, ReaderResponse, reader_tool

__all__ = [
    "BashRequest",
    "BashResponse",
    "ReaderRequest",
    "ReaderResponse",
    "bash_tool",
    "reader_tool",
]
