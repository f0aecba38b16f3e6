"""The built-in tool factories. Each lives in its own module; this package re-exports them."""

from lionfactory.tools.bash import BashRequest, BashResponse, bash_tool
from lionfactory.tools.editor import EditorRequest, EditorResponse, editor_tool
from lionfactory.tools.reader import ReaderRequest, ReaderResponse, reader_tool
from lionfactory.tools.search import SearchRequest, SearchResponse, search_tool

__all__ = [
    "BashRequest",
    "BashResponse",
    "EditorRequest",
    "EditorResponse",
    "ReaderRequest",
    "ReaderResponse",
    "SearchRequest",
    "SearchResponse",
    "bash_tool",
    "editor_tool",
    "reader_tool",
    "search_tool",
]
