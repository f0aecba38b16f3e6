"""The coding toolkit: the standalone tools composed with one branch's policy.

`coding_toolkit(branch, ...)` returns reader, editor, bash, search,
code_check, code_nav, ast_search and context (plus the opt-in sandbox and
subagent), guarded by read-before-edit evidence that follows the branch's
active view, with hooks and nudges. See `lionfactory.coding._toolkit`.
"""

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
from lionfactory.coding._toolkit import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit
from lionfactory.coding.policies import deny_destructive_commands
from lionfactory.coding.rules import Rule

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

# Report the public import path in manifests and saved branches (as trio does
# for its public API): `lionfactory.coding:coding_toolkit`.
coding_toolkit.__module__ = __name__
