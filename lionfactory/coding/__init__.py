"""The coding toolkit: the standalone tools composed with one branch's policy.

`coding_toolkit(branch, ...)` returns reader, editor, bash, search,
code_check, code_nav, ast_search and context (plus the opt-in sandbox and
subagent), guarded by read-before-edit evidence that follows the branch's
active view, with hooks and nudges. See `lionfactory.coding._toolkit`.
"""

import importlib as _importlib
import typing as _typing

from lionfactory._shell_parse import ShellSyntaxError, SimpleCommand, simple_commands
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
    from lionfactory.coding._toolkit import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit

# The toolkit module imports every tool module; it is imported when one of
# its names is first asked for, so that importing this package for a rule or
# a nudge does not build every tool's models.
_FROM_TOOLKIT = frozenset({"ALL_CODING_TOOLS", "DEFAULT_CODING_TOOLS", "coding_toolkit"})

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


def __getattr__(name: str) -> object:
    if name not in _FROM_TOOLKIT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    toolkit = _importlib.import_module("lionfactory.coding._toolkit")
    for each in _FROM_TOOLKIT:
        globals()[each] = getattr(toolkit, each)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_TOOLKIT})
