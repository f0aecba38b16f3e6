"""The built-in tool factories. Each lives in its own module; this package re-exports them.

Adding a tool is one module plus one export:

1. Write ``lionfactory/tools/<name>.py``, copying ``code_nav.py`` (a
   workspace tool: paths through `Workspace`, blocking work in a worker
   thread) or, for a tool that needs no workspace, the shape of
   ``context.py``. The module holds the request model and the response
   model (``extra="forbid"``, a description on every field, failures as a
   response with ``success=False`` and an ``error`` that says what to do
   next), the handler, and the factory ``<name>_tool(...)`` returning a
   `Tool` that describes itself: ``response_model=`` (MCP's output schema,
   and whether a response reports a failure) and ``hints=ToolHints(...)``
   (title, read-only, destructive, idempotent, open-world). Heavy private
   parts go in ``_<name>_*.py`` next to it.
2. Re-export the factory and its models here (and in ``__all__``).
3. For a workspace tool only: add ``"<name>"`` to ``WORKSPACE_TOOLS`` in
   ``lionfactory/_builtins.py`` (the command line, ``mcp serve --toolkit
   standalone`` and the coding toolkit read that one list); to have the
   coding toolkit build it by default, name it in ``DEFAULT_CODING_TOOLS``
   too, and if it starts programs, in ``RUNS_PROGRAMS``.

Nothing else names a tool: a `Branch`, the MCP servers (titles, annotations,
output schemas) and the framework adapters in `lionfactory.integrations`
read what the `Tool` says. ``tests/integrations/test_new_tool_recipe.py``
serves a tool written this way through every one of them.
"""

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
