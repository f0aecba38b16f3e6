"""The catalogue of built-in tools: one row per tool, strings only.

Every list of built-ins is derived from `CATALOGUE`: what loading a saved
branch may call (`lionfactory._registration.FACTORIES`), the tools that need
only a workspace (what the command line lists and calls and ``mcp serve
--toolkit standalone`` serves), which of them start programs (and so take
``isolation=``), and what `coding_toolkit` can build and builds by default.
Adding a built-in is its module, its export and one row here.

The rows name factories by their import path and import nothing: the
registry sits on the lowest floor of the package, and listing the names (or
building one tool) must not import every tool module. What a tool says about
itself (its hints: read-only or not, destructive, open-world) is not repeated
here; it travels on the `Tool` its factory builds, and the permission modes
read it there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

import attrs

from lionfactory._tool import Tool

__all__ = [
    "ALL_CODING_TOOLS",
    "CATALOGUE",
    "DEFAULT_CODING_TOOLS",
    "RUNS_PROGRAMS",
    "WORKSPACE_TOOLS",
    "BuiltinTool",
    "builtin",
    "lazy_exports",
    "load_factory",
    "workspace_factory",
]

Need = Literal["workspace", "branch", "exchange"]
InToolkit = Literal["default", "opt-in", "with bash", "no"]


@attrs.frozen
class BuiltinTool:
    """One built-in tool: where its factory lives and what building it takes.

    Attributes:
        name: the tool's name (what the model calls).
        factory: the public import path users write and saved branches
            record, ``package:factory``.
        module: the module that defines the factory (imported on first use).
        needs: what the factory must be given: ``workspace`` (a root, which
            defaults to the current directory), ``branch`` (it is bound to
            one), ``exchange`` (a message exchange and a roster).
        runs_programs: whether it starts programs, and so takes ``isolation=``.
        coding: whether `coding_toolkit` builds it: ``"default"``,
            ``"opt-in"`` (named in ``tools=``), ``"with bash"`` (it comes
            with bash), or ``"no"``.
        path_argument: the argument that names the file or folder a call
            acts on, or None.
    """

    name: str
    factory: str
    module: str
    needs: frozenset[Need] = frozenset()
    runs_programs: bool = False
    coding: InToolkit = "no"
    path_argument: str | None = None

    @property
    def workspace_only(self) -> bool:
        """Whether a workspace root is all it needs (the command line can build it)."""
        return self.needs == {"workspace"}


def _tool(
    name: str,
    *,
    package: str = "lionfactory.tools",
    needs: frozenset[Need] = frozenset(),
    runs_programs: bool = False,
    coding: InToolkit = "no",
    path_argument: str | None = None,
) -> BuiltinTool:
    """A row whose factory is ``<package>:<name>_tool``.

    A tool of `lionfactory.tools` is defined in ``lionfactory.tools.<name>``
    and re-exported by the package; elsewhere `package` is the module itself.
    """
    module = f"{package}.{name}" if package == "lionfactory.tools" else package
    return BuiltinTool(
        name, f"{package}:{name}_tool", module, needs, runs_programs, coding, path_argument
    )


_WORKSPACE: frozenset[Need] = frozenset({"workspace"})

CATALOGUE: tuple[BuiltinTool, ...] = (
    _tool("reader", needs=_WORKSPACE, coding="default", path_argument="path"),
    _tool("editor", needs=_WORKSPACE, coding="default", path_argument="file_path"),
    _tool("bash", needs=_WORKSPACE, runs_programs=True, coding="default"),
    _tool("search", needs=_WORKSPACE, runs_programs=True, coding="default", path_argument="path"),
    _tool(
        "code_check",
        needs=_WORKSPACE,
        runs_programs=True,
        coding="default",
        path_argument="paths",
    ),
    _tool("code_nav", needs=_WORKSPACE, coding="default", path_argument="path"),
    _tool(
        "ast_search", needs=_WORKSPACE, runs_programs=True, coding="default", path_argument="path"
    ),
    _tool("jobs", coding="with bash"),
    _tool("context", needs=frozenset({"branch"}), coding="default"),
    _tool("messenger", needs=frozenset({"branch", "exchange"})),
    _tool(
        "sandbox",
        package="lionfactory.coding.sandbox",
        needs=frozenset({"branch", "workspace"}),
        runs_programs=True,
        coding="opt-in",
    ),
    _tool(
        "checkpoint",
        package="lionfactory.coding.checkpoint",
        needs=frozenset({"branch"}),
        coding="opt-in",
        path_argument="paths",
    ),
    _tool(
        "subagent",
        package="lionfactory.coding.subagent",
        needs=frozenset({"branch", "workspace"}),
        coding="opt-in",
    ),
)
"""Every built-in tool, in the order every listing uses."""

_BY_NAME = {row.name: row for row in CATALOGUE}

WORKSPACE_TOOLS: tuple[str, ...] = tuple(row.name for row in CATALOGUE if row.workspace_only)
"""The built-ins a workspace is all the context of: what the command line lists and calls."""

RUNS_PROGRAMS: frozenset[str] = frozenset(
    row.name for row in CATALOGUE if row.runs_programs and row.workspace_only
)
"""The workspace tools that start programs, and so take ``isolation=``."""

ALL_CODING_TOOLS: tuple[str, ...] = tuple(
    row.name for row in CATALOGUE if row.coding in ("default", "opt-in")
)
"""Every tool `coding_toolkit` can be asked for, in the order it returns them."""

DEFAULT_CODING_TOOLS: tuple[str, ...] = tuple(
    row.name for row in CATALOGUE if row.coding == "default"
)
"""The tools `coding_toolkit` builds when ``tools`` is omitted."""


def builtin(name: str) -> BuiltinTool:
    """The catalogue row of built-in `name`.

    Raises:
        KeyError: no built-in has that name.
    """
    return _BY_NAME[name]


def load_factory(row: BuiltinTool) -> Callable[..., Tool | list[Tool]]:
    """The factory `row` names, its module imported now."""
    attribute = row.factory.partition(":")[2]
    return cast(
        "Callable[..., Tool | list[Tool]]", getattr(importlib.import_module(row.module), attribute)
    )


def workspace_factory(name: str) -> Callable[..., Tool]:
    """The factory of workspace tool `name` (``reader`` -> `reader_tool`).

    Raises:
        KeyError: `name` is not one of `WORKSPACE_TOOLS`.
    """
    if name not in WORKSPACE_TOOLS:
        raise KeyError(name)
    return cast("Callable[..., Tool]", load_factory(_BY_NAME[name]))


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    on_import_error: Callable[[ImportError], Exception | None] | None = None,
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import each export on first use.

    A package of tools re-exports names from modules that cost more to import
    than the rest of the package; a program that uses one tool should not
    pay for all of them. Each name is imported from its module when first
    asked for, then kept in the package's namespace (the next lookup is a
    plain attribute).

    Args:
        package: the package's ``__name__`` (for the AttributeError).
        exports: each lazily exported name, and the module that defines it.
        namespace: the package's ``globals()``.
        on_import_error: turns a module's ImportError into the exception to
            raise instead (a missing extra named), or None to raise it as is.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            instead = None if on_import_error is None else on_import_error(exc)
            if instead is None:
                raise
            raise instead from exc
        value = getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
