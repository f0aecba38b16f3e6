"""Imports in the package run downhill only.

The package is a house of floors. A module may import from its own floor and
the floors below, never from a floor above, so a low floor (the records, the
operating-system seams) can be read, tested and changed without the rest:

0. records: errors, messages, the Tool record and its call pipeline, call
   context, the chat-model protocol, registration records;
1. seams to the outside world: workspace paths, processes and their
   isolation, helper binaries, the project's ignore rules, mailboxes;
2. the branch: acting, cloning, persistence and the stores and exchanges
   built on it (and the package facade, which re-exports floors 0-2);
3. the built-in tools;
4. what composes tools: the coding toolkit, MCP, framework integrations,
   model adapters, the testing fakes;
5. the command line.

Every import counts, including deferred ones inside functions and those under
``TYPE_CHECKING``: a deferred upward import is still an upward dependency. A
new module must be given a floor here, on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lionfactory"

FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "lionfactory.errors",
        "lionfactory._approvals",
        "lionfactory._checkpoints",
        "lionfactory._messages",
        "lionfactory._tool",
        "lionfactory._call",
        "lionfactory._registration",
        "lionfactory._evidence",
        "lionfactory._echo",
        "lionfactory._catalogue",
    ),
    (
        "lionfactory._os",
        "lionfactory._shell",
        "lionfactory._exchange",
    ),
    (
        "lionfactory",
        "lionfactory._acting",
        "lionfactory._branch",
        "lionfactory._persist",
        "lionfactory.backends",
    ),
    ("lionfactory.tools",),
    (
        "lionfactory.coding",
        "lionfactory.mcp",
        "lionfactory.integrations",
        "lionfactory.models",
        "lionfactory.testing",
    ),
    ("lionfactory._cli", "lionfactory.__main__"),
)
"""Each floor lists module names; a name covers its submodules too."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def floor_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching prefix, floor)
    for floor, names in enumerate(FLOORS):
        for name in names:
            if module == name or module.startswith(name + "."):
                # "lionfactory" itself matches only exactly: it is the facade.
                if name == "lionfactory" and module != name:
                    continue
                if best is None or len(name) > best[0]:
                    best = (len(name), floor)
    return None if best is None else best[1]


def imports_of(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                # `from lionfactory._os import beneath` imports the submodule, not
                # the facade; `from lionfactory import Branch` imports the facade.
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
    return {name for name in found if name == "lionfactory" or name.startswith("lionfactory.")}


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = package_modules()


def test_every_module_has_a_floor() -> None:
    unplaced = [name for name in package_modules() if floor_of(name) is None]
    assert not unplaced, f"give these modules a floor in tests/test_layering.py: {unplaced}"


def test_no_module_imports_from_a_higher_floor() -> None:
    modules = package_modules()
    upward = []
    for name, path in modules.items():
        own = floor_of(name)
        assert own is not None
        for target in sorted(imports_of(path, name)):
            if target not in modules:
                continue
            theirs = floor_of(target)
            if theirs is not None and theirs > own:
                upward.append(f"{name} (floor {own}) imports {target} (floor {theirs})")
    assert not upward, "\n".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The test above cannot pass vacuously: a planted upward import is found."""
    fake = tmp_path / "lionfactory" / "_tool.py"
    fake.parent.mkdir()
    fake.write_text("from lionfactory._cli import main\n")
    assert imports_of(fake, "lionfactory._tool") == {"lionfactory._cli"}
    assert floor_of("lionfactory._cli") > floor_of("lionfactory._tool")  # type: ignore[operator]


ALLOWED_CYCLES: dict[frozenset[str], str] = {
    frozenset({"lionfactory._branch", "lionfactory._persist"}): (
        "Branch.to_dict/from_dict delegate to _persist (imported when called), which needs "
        "Branch to build one: the format lives in its own module, the API on the class."
    ),
    frozenset(
        {
            "lionfactory.backends._store",
            "lionfactory.backends._sqlite_store",
            "lionfactory.backends._redis_store",
        }
    ): (
        "open_store(url) imports the backend a URL names only when it is chosen (a SQLite "
        "user never imports redis); the backends subclass the contract in _store."
    ),
    frozenset({"lionfactory.mcp._serve", "lionfactory.mcp._stored_sessions"}): (
        "the stored sessions name SessionBranches only in annotations; the server imports "
        "them only when a store is configured."
    ),
    frozenset(
        {
            "lionfactory._approvals",
            "lionfactory._messages",
            "lionfactory._tool",
            "lionfactory.errors",
        }
    ): (
        "the edges back are annotations only (TYPE_CHECKING): _messages names Tool and "
        "errors names PendingCall in types; at run time _tool imports _approvals, which "
        "imports _messages, and neither imports back."
    ),
}
"""Import cycles that stay, each with the reason it is harmless."""


def import_cycles() -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph = {
        name: {t for t in imports_of(path, name) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_except_the_justified_ones() -> None:
    unexplained = [sorted(group) for group in import_cycles() if group not in ALLOWED_CYCLES]
    assert not unexplained, f"import cycles without a reason in ALLOWED_CYCLES: {unexplained}"


def test_the_package_top_level_holds_at_most_18_modules() -> None:
    """A concern with several modules gets a subpackage (``_os/``, ``_shell/``) instead."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 18, top
