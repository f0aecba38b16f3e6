"""The code_nav tool on a generated module."""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from lionfactory.errors import ToolInputError
from lionfactory.tools.code_nav import NavItem, NavRequest, NavResponse, code_nav_tool

MODULE = '''\
"""A module to navigate."""

import os

LIMIT: int = 10
name, (first, *rest) = "x", (1, 2, 3)


class Base:
    pass


class Greeter(Base, metaclass=type):
    greeting = "hello"

    def __init__(self, name: str, /, loud=False, *, times: int = 1, **extra) -> None:
        self.name = name

    async def fetch(self, *args, timeout: float = 1.0):
        return await other(self.name, timeout=timeout)

    if os.name:
        def conditional(self):
            pass

    class Inner:
        def deep(self): ...


def helper(a, b=2, /, c=3, *, d, e=5):
    def nested():
        return helper
    return nested


async def other(value, timeout):
    greeter = Greeter(value)
    return greeter.name, name
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(MODULE)
    return root


async def nav(workspace: Path, **arguments: Any) -> dict[str, Any]:
    return await code_nav_tool(workspace_root=workspace, engine="ast")(**arguments)


def summary(items: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(item["kind"], item["name"], item["line"]) for item in items]


async def test_outline_lists_classes_functions_and_methods(workspace: Path) -> None:
    result = await nav(workspace, action="outline", path="pkg/mod.py")
    assert result["success"] is True
    assert summary(result["items"]) == [
        ("class", "Base", 9),
        ("class", "Greeter", 13),
        ("method", "Greeter.__init__", 16),
        ("async method", "Greeter.fetch", 19),
        ("method", "Greeter.conditional", 23),
        ("class", "Greeter.Inner", 26),
        ("method", "Greeter.Inner.deep", 27),
        ("function", "helper", 30),
        ("function", "helper.nested", 31),
        ("async function", "other", 36),
    ]


async def test_signatures_keep_positional_only_and_keyword_only_parameters(
    workspace: Path,
) -> None:
    result = await nav(workspace, action="outline", path="pkg/mod.py")
    signatures = {item["name"]: item["signature"] for item in result["items"]}
    assert signatures["Greeter.__init__"] == (
        "def __init__(self, name: str, /, loud=False, *, times: int = 1, **extra) -> None"
    )
    assert signatures["Greeter.fetch"] == "async def fetch(self, *args, timeout: float = 1.0)"
    assert signatures["helper"] == "def helper(a, b=2, /, c=3, *, d, e=5)"
    assert signatures["Greeter"] == "class Greeter(Base, metaclass=type)"
    assert signatures["Base"] == "class Base"


async def test_columns_are_one_based(workspace: Path) -> None:
    result = await nav(workspace, action="outline", path="pkg/mod.py")
    columns = {item["name"]: item["col"] for item in result["items"]}
    assert (columns["Base"], columns["Greeter.__init__"], columns["Greeter.Inner.deep"]) == (
        1,
        5,
        9,
    )


async def test_find_definition_of_a_method_by_bare_and_dotted_name(workspace: Path) -> None:
    bare = await nav(workspace, action="find_definition", path="pkg/mod.py", symbol="fetch")
    dotted = await nav(
        workspace, action="find_definition", path="pkg/mod.py", symbol="Greeter.fetch"
    )
    assert (
        summary(bare["items"])
        == summary(dotted["items"])
        == [("async method", "Greeter.fetch", 19)]
    )


async def test_find_definition_of_variables(workspace: Path) -> None:
    annotated = await nav(workspace, action="find_definition", path="pkg/mod.py", symbol="LIMIT")
    unpacked = await nav(workspace, action="find_definition", path="pkg/mod.py", symbol="rest")
    assert annotated["items"] == [
        {"kind": "variable", "name": "LIMIT", "line": 5, "col": 1, "signature": "LIMIT: int = 10"}
    ]
    assert summary(unpacked["items"]) == [("variable", "rest", 6)]
    assert unpacked["items"][0]["col"] == 16


async def test_find_definition_of_an_absent_symbol_is_empty(workspace: Path) -> None:
    result = await nav(workspace, action="find_definition", path="pkg/mod.py", symbol="nope")
    assert (result["success"], result["items"]) == (True, [])


async def test_find_references_lists_names_and_attributes(workspace: Path) -> None:
    result = await nav(workspace, action="find_references", path="pkg/mod.py", symbol="name")
    assert [(i["kind"], i["line"], i["col"]) for i in result["items"]] == [
        ("name", 6, 1),
        ("attribute", 17, 14),
        ("name", 17, 21),
        ("attribute", 20, 33),
        ("attribute", 22, 11),
        ("attribute", 38, 20),
        ("name", 38, 26),
    ]
    assert result["items"][1]["signature"] == "self.name = name"


async def test_find_references_counts_characters_not_bytes(workspace: Path) -> None:
    (workspace / "uni.py").write_text("s = 'ééé'; t = s.upper\n")
    result = await nav(workspace, action="find_references", path="uni.py", symbol="upper")
    assert (result["items"][0]["line"], result["items"][0]["col"]) == (1, 18)


@pytest.mark.parametrize("action", ["find_definition", "find_references"])
async def test_symbol_actions_need_a_symbol(workspace: Path, action: str) -> None:
    result = await nav(workspace, action=action, path="pkg/mod.py")
    assert result["success"] is False
    assert "symbol" in result["error"]


async def test_invalid_action_fails_validation(workspace: Path) -> None:
    with pytest.raises(ToolInputError, match="action"):
        await nav(workspace, action="rename", path="pkg/mod.py")


async def test_syntax_error_is_a_typed_failure(workspace: Path) -> None:
    (workspace / "broken.py").write_text("def f(:\n    pass\n")
    result = await nav(workspace, action="outline", path="broken.py")
    assert result["success"] is False
    assert "line 1" in result["error"]


async def test_undecodable_file_is_a_typed_failure(workspace: Path) -> None:
    (workspace / "latin.py").write_bytes(b"x = '\xe9'\n")
    result = await nav(workspace, action="outline", path="latin.py")
    assert result["success"] is False
    assert "latin.py" in result["error"]


async def test_declared_encoding_is_honoured(workspace: Path) -> None:
    (workspace / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'; y = x.real\n")
    result = await nav(workspace, action="find_references", path="latin.py", symbol="real")
    assert (result["items"][0]["line"], result["items"][0]["col"]) == (2, 16)


@pytest.mark.parametrize("path", ["../outside.py", "/etc/passwd", ".env", "pkg", "missing.py"])
async def test_bad_paths_are_typed_failures(workspace: Path, path: str) -> None:
    (workspace / ".env").write_text("A = 1\n")
    result = await nav(workspace, action="outline", path=path)
    assert result["success"] is False
    assert result["error"]


def test_models_describe_every_field() -> None:
    tool = code_nav_tool()
    assert (tool.name, tool.request_model) == ("code_nav", NavRequest)
    for model in (NavRequest, NavResponse, NavItem):
        assert all(field.description for field in model.model_fields.values())


# -- load: many concurrent calls ---------------------------------------------------


@pytest.fixture
def gil_yielding_collections():
    """Every garbage collection lets another thread run.

    That is the interleaving that breaks concurrent `ast.parse` in CPython (its
    AST depth counter is per interpreter), made certain instead of left to
    chance as under real load.
    """

    def yield_gil(_phase: str, _info: dict[str, int]) -> None:
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(yield_gil)
    gc.set_threshold(50)
    try:
        yield
    finally:
        gc.callbacks.remove(yield_gil)
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("gil_yielding_collections")
async def test_concurrent_calls_never_fail(tmp_path: Path) -> None:
    """20 sessions x 25 calls at once, as an MCP server under load runs them."""
    nested = "[" * 40 + "1" + "]" * 40
    source = "".join(
        f"def f{i}(a, b={nested}):\n    return {{k: [v] for k, v in a}}\n" for i in range(5)
    )
    (tmp_path / "mod.py").write_text(source)
    tool = code_nav_tool(workspace_root=tmp_path, engine="ast")
    failures: list[str] = []

    async def session() -> None:
        for _ in range(25):
            try:
                result = await tool(action="outline", path="mod.py")
            except Exception as exc:  # the test reports every way a call can fail
                failures.append(repr(exc))
                continue
            if not result["success"] or len(result["items"]) != 5:
                failures.append(str(result))

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(session)

    assert failures == []


async def test_source_nested_too_deeply_for_the_parser_is_a_typed_failure(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("x = " + "(" * 5_000 + "1" + ")" * 5_000 + "\n")
    tool = code_nav_tool(workspace_root=tmp_path, engine="ast")

    result = await tool(action="outline", path="deep.py")

    assert result["success"] is False
    assert "deep.py" in result["error"]
