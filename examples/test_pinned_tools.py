"""Pin your branches' tool lists in your own tests: copy this file and adapt it.

A branch's `manifest()` lists, for each tool, its name, the factory that
built it, a summary of the factory's arguments, a hash of the schema the model
sees, and whether the tool is bound to the branch. Pinning it turns a silent
change (a tool dropped or renamed, an option changed, a description edited)
into a failing test with a readable diff. A clone rebuilds every tool from its
factory, so its manifest must equal its source's, and none of its tools may
reach back into the source.

Run it with ``python -m pytest test_pinned_tools.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory import Branch, function_tool
from lionfactory.coding import coding_toolkit
from lionfactory.testing import assert_manifest, assert_no_foreign_bindings


def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count.
    """
    return len(text.split())


@pytest.fixture
def reviewer(tmp_path: Path) -> Branch:
    """The branch under test: read-only coding tools plus one function of ours."""
    branch = Branch("You review code; you never edit it.", name="reviewer")
    branch.register(coding_toolkit, workspace_root=tmp_path, tools=["reader", "search", "context"])
    branch.register(function_tool(word_count))
    return branch


def test_the_reviewer_has_exactly_these_tools(reviewer: Branch) -> None:
    assert_manifest(reviewer, ["reader", "search", "context", "word_count"])


def test_who_built_each_tool_and_what_it_is_bound_to(reviewer: Branch) -> None:
    toolkit = "lionfactory.coding:coding_toolkit"
    assert_manifest(
        reviewer,
        [
            {"name": "reader", "factory": toolkit, "bound_to": "branch"},
            {"name": "search", "factory": toolkit, "bound_to": "branch"},
            {"name": "context", "factory": toolkit, "bound_to": "branch"},
            {"name": "word_count", "factory": None, "bound_to": None},  # a static tool
        ],
    )


def test_the_toolkit_options_are_pinned(reviewer: Branch) -> None:
    entry = next(e for e in reviewer.manifest() if e["name"] == "reader")
    assert entry["kwargs"]["tools"] == ["reader", "search", "context"]


def test_the_model_sees_these_parameters(reviewer: Branch) -> None:
    parameters = reviewer.tools["word_count"].schema("openai")["function"]["parameters"]
    assert parameters["properties"] == {
        "text": {"description": "the text to count.", "type": "string"}
    }
    assert parameters["required"] == ["text"]


def test_a_clone_pins_the_same_tools_rebuilt_for_itself(reviewer: Branch) -> None:
    clone = reviewer.clone(name="second-opinion")
    assert clone.manifest() == reviewer.manifest()
    assert all(tool.bound_to in (None, clone.id) for tool in clone.tools.values())
    assert_no_foreign_bindings(clone)
