"""DESIGN §4.3, for every built-in: no tool of a clone reaches its source branch."""

from __future__ import annotations

import pytest

from lionfactory import Branch, Exchange
from lionfactory.coding import ALL_CODING_TOOLS, coding_toolkit
from lionfactory.testing import ScriptedModel, assert_no_foreign_bindings, find_foreign_bindings
from lionfactory.tools import (
    ast_search_tool,
    bash_tool,
    code_check_tool,
    code_nav_tool,
    context_tool,
    editor_tool,
    messenger_tool,
    reader_tool,
    search_tool,
)

WORKSPACE_FACTORIES = [
    reader_tool,
    editor_tool,
    bash_tool,
    search_tool,
    code_check_tool,
    code_nav_tool,
    ast_search_tool,
]


def registrations(workspace, source: Branch):
    exchange = Exchange()
    peer = Branch()
    exchange.register(peer.id)
    yield from ((f, {"workspace_root": workspace}) for f in WORKSPACE_FACTORIES)
    yield context_tool, {}
    yield messenger_tool, {"exchange": exchange, "roster": {"peer": peer.id}, "sender_name": "me"}
    yield coding_toolkit, {"workspace_root": workspace, "tools": list(ALL_CODING_TOOLS)}


@pytest.mark.parametrize("index", range(10))
def test_a_clone_of_every_builtin_reaches_only_itself(workspace, index):
    source = Branch("sys", chat_model=ScriptedModel([]))
    factory, kwargs = list(registrations(workspace, source))[index]
    source.register(factory, **kwargs)
    clone = source.clone()
    assert_no_foreign_bindings(clone)
    assert_no_foreign_bindings(source)
    for name, tool in clone.tools.items():
        assert tool.bound_to in (None, clone.id), name
        if tool.bound_to is not None:
            assert tool is not source.tools[name]


def test_the_detector_sees_a_tool_shared_across_clones(workspace):
    source = Branch("sys")
    source.register(context_tool)
    clone = source.clone()
    # Forge the bug the baseline had (D5): the clone holding the source's tool.
    clone._tools["context"] = source.tools["context"]
    assert find_foreign_bindings(clone)
