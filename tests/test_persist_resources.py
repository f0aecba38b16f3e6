"""A live object inside a factory argument is handed back as the whole argument, by its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lionfactory import Branch
from lionfactory.backends import SqliteBranchStore
from lionfactory.coding import coding_toolkit
from lionfactory.errors import ConfigurationError

ASKED: list[str] = []


def ask_bash(tool: str, arguments: dict[str, Any]) -> None:
    """An unregistered security hook: it must be handed back on load."""
    ASKED.append(arguments.get("command", ""))


async def test_saved_hooks_are_supplied_back_as_the_whole_mapping(tmp_path: Path) -> None:
    hooks = {"bash": {"security": [ask_bash]}}
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path, hooks=hooks)
    async with SqliteBranchStore(str(tmp_path / "b.db")) as store:
        await store.save(branch)
        with pytest.raises(ConfigurationError, match="resource 'hooks'"):
            await store.load(branch.id)
        loaded = await store.load(branch.id, resources={"hooks": hooks})
    ASKED.clear()
    action = await loaded.act("bash", {"command": "echo hi"})
    assert action.outcome == "done", action.payload
    assert ASKED == ["echo hi"]  # the hook runs again on the loaded branch


async def test_a_wrong_resource_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path, hooks={"bash": {"pre": [ask_bash]}})
    async with SqliteBranchStore(str(tmp_path / "b.db")) as store:
        await store.save(branch)
        # The function alone, where the mapping was passed.
        with pytest.raises(ConfigurationError, match="refused the resource\\(s\\) 'hooks'") as e:
            await store.load(branch.id, resources={"hooks": ask_bash})
    assert "the whole hooks mapping" in str(e.value)


def test_an_argument_of_data_and_registered_callables_stays_data(tmp_path: Path) -> None:
    from lionfactory.coding import deny_destructive_commands

    branch = Branch()
    hooks = {"bash": {"security": [deny_destructive_commands]}}
    branch.register(coding_toolkit, workspace_root=tmp_path, hooks=hooks)
    saved = branch.to_dict()
    (entry,) = saved["registrations"]
    assert entry["kwargs"]["hooks"] == {
        "bash": {"security": [{"$callable": "lionfactory.coding:deny_destructive_commands"}]}
    }
    Branch.from_dict(saved)  # no resource needed
