"""The built-in tool factories. Each lives in its own module; this package re-exports them."""

from lionfactory._os.environment import EnvPolicy
from lionfactory.tools.ast_search import (
    AstSearchMatch,
    AstSearchRequest,
    AstSearchResponse,
    ast_search_tool,
)
from lionfactory.tools.bash import BashRequest, BashResponse, bash_tool
from lionfactory.tools.code_check import (
    CodeCheckRequest,
    CodeCheckResponse,
    CodeDiagnostic,
    code_check_tool,
)
from lionfactory.tools.code_nav import NavItem, NavRequest, NavResponse, code_nav_tool
from lionfactory.tools.context import (
    ContextMessage,
    ContextRequest,
    ContextResponse,
    context_tool,
)
from lionfactory.tools.editor import EditorRequest, EditorResponse, editor_tool
from lionfactory.tools.jobs import JobInfo, JobsRequest, JobsResponse, jobs_tool
from lionfactory.tools.messenger import (
    MessengerEvent,
    MessengerRequest,
    MessengerResponse,
    ReceivedMessage,
    RecipientResult,
    messenger_tool,
)
from lionfactory.tools.reader import ReaderRequest, ReaderResponse, reader_tool
from lionfactory.tools.search import SearchRequest, SearchResponse, search_tool

__all__ = [
    "AstSearchMatch",
    "AstSearchRequest",
    "AstSearchResponse",
    "BashRequest",
    "BashResponse",
    "CodeCheckRequest",
    "CodeCheckResponse",
    "CodeDiagnostic",
    "ContextMessage",
    "ContextRequest",
    "ContextResponse",
    "EditorRequest",
    "EditorResponse",
    "EnvPolicy",
    "JobInfo",
    "JobsRequest",
    "JobsResponse",
    "MessengerEvent",
    "MessengerRequest",
    "MessengerResponse",
    "NavItem",
    "NavRequest",
    "NavResponse",
    "ReaderRequest",
    "ReaderResponse",
    "ReceivedMessage",
    "RecipientResult",
    "SearchRequest",
    "SearchResponse",
    "ast_search_tool",
    "bash_tool",
    "code_check_tool",
    "code_nav_tool",
    "context_tool",
    "editor_tool",
    "jobs_tool",
    "messenger_tool",
    "reader_tool",
    "search_tool",
]
