"""`__all__` lists exactly the public names, sorted (after httpx's test)."""

from __future__ import annotations

import importlib
import types

import pytest

MODULES = [
    "lionfactory",
    "lionfactory.tools",
    "lionfactory.coding",
    "lionfactory.testing",
    "lionfactory.errors",
    "lionfactory.models",
    "lionfactory.mcp",
    "lionfactory.backends",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_all_is_sorted_and_complete(module_name):
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for name in exported:  # a facade may load some names on first use (lionfactory.mcp)
        getattr(module, name)
    # A facade (lionfactory, lionfactory.tools) exports every public name it
    # holds; a module of its own (testing, errors) exports what it defines,
    # not what it imports to do its work.
    facade = module_name in (
        "lionfactory",
        "lionfactory.tools",
        "lionfactory.coding",
        "lionfactory.mcp",
        "lionfactory.backends",
    )
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and (facade or getattr(value, "__module__", None) == module_name)
    }
    public -= {"annotations"}  # from __future__ import annotations
    assert set(exported) == public


def test_every_exported_name_exists():
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            assert hasattr(module, name), f"{module_name}.{name}"
