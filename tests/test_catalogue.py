"""The catalogue is the one list of built-ins: every factory has a row, every row restores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lionfactory.tools
from lionfactory import Branch, Exchange
from lionfactory._catalogue import (
    ALL_CODING_TOOLS,
    CATALOGUE,
    DEFAULT_CODING_TOOLS,
    RUNS_PROGRAMS,
    WORKSPACE_TOOLS,
    builtin,
    load_factory,
)
from lionfactory._registration import FACTORIES
from lionfactory.coding import coding_toolkit
from lionfactory.coding.rules import hinted_rules
from lionfactory.errors import ToolDenied


def test_every_factory_of_lionfactory_tools_has_a_row() -> None:
    factories = sorted(name for name in lionfactory.tools.__all__ if name.endswith("_tool"))
    assert factories, "lionfactory.tools exports no factory"
    for name in factories:
        row = builtin(name.removesuffix("_tool"))
        assert row.factory == f"lionfactory.tools:{name}"
        assert load_factory(row) is getattr(lionfactory.tools, name)


def test_rows_are_unique_and_name_their_own_tool(tmp_path: Path) -> None:
    assert len({row.name for row in CATALOGUE}) == len(CATALOGUE)
    for row in CATALOGUE:
        if row.workspace_only:
            built = load_factory(row)(workspace_root=tmp_path)
            assert [t.name for t in (built if isinstance(built, list) else [built])] == [row.name]


def _arguments(name: str, root: Path, exchange: Exchange) -> dict[str, Any]:
    row = builtin(name)
    if name == "messenger":
        return {"exchange": exchange, "roster": {}}
    if name == "subagent":
        return {"factory": coding_toolkit, "workspace_root": root}
    return {"workspace_root": root} if "workspace" in row.needs else {}


@pytest.mark.parametrize("name", [row.name for row in CATALOGUE])
def test_every_builtin_restores_from_to_dict(name: str, tmp_path: Path) -> None:
    """A branch with any one built-in registered by its factory saves and loads."""
    exchange = Exchange()
    branch = Branch()
    branch.register(load_factory(builtin(name)), **_arguments(name, tmp_path, exchange))
    data = branch.to_dict()
    restored = Branch.from_dict(data, resources={"exchange": exchange})
    assert list(restored.tools) == [name]
    assert FACTORIES.resolve(builtin(name).factory) is load_factory(builtin(name))


def test_the_derived_lists() -> None:
    assert WORKSPACE_TOOLS == (
        "reader",
        "editor",
        "bash",
        "search",
        "code_check",
        "code_nav",
        "ast_search",
    )
    assert {"bash", "search", "code_check", "ast_search"} == RUNS_PROGRAMS
    assert (*WORKSPACE_TOOLS, "context", "sandbox", "checkpoint", "subagent") == ALL_CODING_TOOLS
    assert (*WORKSPACE_TOOLS, "context") == DEFAULT_CODING_TOOLS


def test_read_only_denies_a_tool_by_its_hints(tmp_path: Path) -> None:
    """A tool nobody listed is denied in read_only mode when its hints say it changes things."""
    tools = coding_toolkit(Branch(), workspace_root=tmp_path, tools=list(ALL_CODING_TOOLS))
    denied = {rule.tool for rule in hinted_rules("read_only", tools)}
    # editor, bash, sandbox and checkpoint (its real rewinds of files: listing, diffing
    # and dry runs change nothing) are the mode's own rules; context changes only the
    # conversation.
    assert denied == {"jobs", "subagent"}
    assert hinted_rules("accept_edits", tools) == ()


async def test_read_only_mode_denies_jobs_through_the_toolkit(tmp_path: Path) -> None:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path, mode="read_only")
    result = await branch.act("jobs", {"action": "list"})
    assert result.error_type == ToolDenied.__name__, result
    assert "read_only mode" in str(result.error)
    assert "jobs can change things" in str(result.error)
    assert "ask them to switch the mode" in str(result.error)
    listed = await branch.act("reader", {"action": "list_dir", "path": "."})
    assert listed.error is None
