"""The built-in tool factories. Each lives in its own module; this package re-exports them.

Adding a tool is three places in the package: its module, its export and its
catalogue row.

1. Write ``lionfactory/tools/<name>.py``, copying ``code_nav.py`` (a
   workspace tool: paths through `Workspace`, a file read through
   ``lionfactory._os.regular``, blocking work in a worker thread) or, for a
   tool that needs no workspace, the shape of ``context.py``. The module
   holds the request model and the response model (``extra="forbid"``, a
   description on every field, failures as a response with
   ``success=False`` and an ``error`` that says what to do next), the
   handler, and the factory ``<name>_tool(...)`` returning a `Tool` that
   describes itself: ``response_model=`` (MCP's output schema, and whether
   a response reports a failure) and ``hints=ToolHints(...)`` (title,
   read-only, destructive, idempotent, open-world: a tool that is not
   read-only is denied in the ``read_only`` mode without being listed
   anywhere). Heavy private parts go in ``_<name>_*.py`` next to it.
2. Re-export the factory and its models here: name them in ``_EXPORTS``
   (imported on first use), under ``TYPE_CHECKING`` and in ``__all__``.
3. Add its row to ``CATALOGUE`` in ``lionfactory/_catalogue.py``: what it
   needs (a workspace, a branch, an exchange), whether it starts programs,
   whether the coding toolkit builds it (by default, or only when named in
   ``tools=``), and the argument that names its path. Saved branches
   restore it, the command line lists and calls it, ``mcp serve`` serves it
   and the coding toolkit builds it, all from that row.

Nothing else names a tool: a `Branch`, the MCP servers (titles, annotations,
output schemas) and the framework adapters in `lionfactory.integrations`
read what the `Tool` says. ``tests/integrations/test_new_tool_recipe.py``
adds a tool in exactly these three places to a copy of the package and
serves it through every one of them.
"""

import typing as _typing

from lionfactory._catalogue import lazy_exports as _lazy_exports
from lionfactory._os.environment import EnvPolicy

if _typing.TYPE_CHECKING:
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

# Each tool module is imported when one of its names is first asked for
# (``from lionfactory.tools import reader_tool`` imports only the reader):
# the ten modules together cost more than the rest of the package
# (their request models and records are built when the module runs), and a
# program that serves one tool should not pay for all of them.
_EXPORTS: dict[str, str] = {
    "AstSearchMatch": "lionfactory.tools.ast_search",
    "AstSearchRequest": "lionfactory.tools.ast_search",
    "AstSearchResponse": "lionfactory.tools.ast_search",
    "BashRequest": "lionfactory.tools.bash",
    "BashResponse": "lionfactory.tools.bash",
    "CodeCheckRequest": "lionfactory.tools.code_check",
    "CodeCheckResponse": "lionfactory.tools.code_check",
    "CodeDiagnostic": "lionfactory.tools.code_check",
    "ContextMessage": "lionfactory.tools.context",
    "ContextRequest": "lionfactory.tools.context",
    "ContextResponse": "lionfactory.tools.context",
    "EditorRequest": "lionfactory.tools.editor",
    "EditorResponse": "lionfactory.tools.editor",
    "JobInfo": "lionfactory.tools.jobs",
    "JobsRequest": "lionfactory.tools.jobs",
    "JobsResponse": "lionfactory.tools.jobs",
    "MessengerEvent": "lionfactory.tools.messenger",
    "MessengerRequest": "lionfactory.tools.messenger",
    "MessengerResponse": "lionfactory.tools.messenger",
    "NavItem": "lionfactory.tools.code_nav",
    "NavRequest": "lionfactory.tools.code_nav",
    "NavResponse": "lionfactory.tools.code_nav",
    "ReaderRequest": "lionfactory.tools.reader",
    "ReaderResponse": "lionfactory.tools.reader",
    "ReceivedMessage": "lionfactory.tools.messenger",
    "RecipientResult": "lionfactory.tools.messenger",
    "SearchRequest": "lionfactory.tools.search",
    "SearchResponse": "lionfactory.tools.search",
    "ast_search_tool": "lionfactory.tools.ast_search",
    "bash_tool": "lionfactory.tools.bash",
    "code_check_tool": "lionfactory.tools.code_check",
    "code_nav_tool": "lionfactory.tools.code_nav",
    "context_tool": "lionfactory.tools.context",
    "editor_tool": "lionfactory.tools.editor",
    "jobs_tool": "lionfactory.tools.jobs",
    "messenger_tool": "lionfactory.tools.messenger",
    "reader_tool": "lionfactory.tools.reader",
    "search_tool": "lionfactory.tools.search",
}

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


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, globals())
