"""The coding toolkit: the standalone tools composed with one branch's policy.

`coding_toolkit(branch, ...)` returns reader, editor, bash, search,
code_check, code_nav, ast_search and context (plus the opt-in sandbox and
subagent), guarded by read-before-edit evidence that follows the branch's
active view, with hooks and nudges. See `lionfactory.coding._toolkit`.
"""

import typing as _typing

from lionfactory._catalogue import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS
from lionfactory._catalogue import lazy_exports as _lazy_exports
from lionfactory._shell.parse import ShellSyntaxError, SimpleCommand, simple_commands
from lionfactory.coding._active import ActiveWorkspace
from lionfactory.coding._nudges import (
    BashFailureStreak,
    CallRecord,
    ContextUsage,
    EditsWithoutCheck,
    NudgeRule,
    NudgeSnapshot,
    default_nudge_rules,
)
from lionfactory.coding.policies import deny_destructive_commands
from lionfactory.coding.rules import Rule

if _typing.TYPE_CHECKING:
    from lionfactory.coding._toolkit import coding_toolkit

# The toolkit module imports every tool module; it is imported when
# `coding_toolkit` is first asked for, so that importing this package for a
# rule or a nudge does not build every tool's models.
_FROM_TOOLKIT = {"coding_toolkit": "lionfactory.coding._toolkit"}

__all__ = [
    "ALL_CODING_TOOLS",
    "ActiveWorkspace",
    "BashFailureStreak",
    "CallRecord",
    "ContextUsage",
    "DEFAULT_CODING_TOOLS",
    "EditsWithoutCheck",
    "NudgeRule",
    "NudgeSnapshot",
    "Rule",
    "ShellSyntaxError",
    "SimpleCommand",
    "coding_toolkit",
    "default_nudge_rules",
    "deny_destructive_commands",
    "simple_commands",
]


__getattr__, __dir__ = _lazy_exports(__name__, _FROM_TOOLKIT, globals())
