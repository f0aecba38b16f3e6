"""The ``code_nav`` tool: definitions, references, types and errors of Python code.

Two engines answer it; every response names the one that did (``engine``):

* ``"ty"``, Astral's type checker as a language server (`_code_intel`),
  when it is installed (the ``code`` extra): ``find_definition`` follows
  imports into other files, ``find_references`` lists uses across the
  workspace, and ``hover``, ``diagnostics`` and ``workspace_symbols`` exist
  only here. One server per branch, started on first use, closed by
  `Branch.aclose`; it runs under the tool's isolation with nothing writable
  but its private temporary directory and no network.
* ``"ast"``: the standard library's `ast` on one contained file (in a
  worker thread), never importing or running it. Syntactic, not semantic;
  ``"auto"`` falls back to it when the server cannot answer, and says why.

A position is a ``symbol`` plus an optional 1-based ``line``; the tool finds
the column. Rows are ``path:line: text`` (the reader's numbering), paged with
``offset`` and ``limit``. What the ast engine does:

* ``outline`` lists classes, functions and methods in source order, with
  dotted names (``Greeter.hello``, ``outer.inner``) and their signatures.
  Kinds are ``class``, ``function``, ``async function``, ``method`` and
  ``async method`` (a function defined directly in a class body, also inside
  an ``if`` there, is a method). Signatures keep positional-only ``/``,
  keyword-only ``*`` markers, defaults, annotations and return annotations.
* ``find_definition`` matches classes, functions and methods by bare or
  dotted name, and names bound by assignment or annotated assignment (kind
  ``variable``). It does not follow imports.
* ``find_references`` lists every ``Name`` with that identifier (reads and
  writes alike, kind ``name``) and every attribute access ending in it (kind
  ``attribute``); the signature field holds the source line. A dotted symbol
  (``Config.load``) looks for its last part (``load``).

Lines and columns are one-based; columns count characters, not bytes. A file
that is not valid text in its declared encoding, or not valid Python, is a
typed failure (``success=False``), as is a file over 5 MB.
"""

from __future__ import annotations

import ast
import io
import os
import re
import threading
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import anyio.to_thread
import attrs
from pydantic import Field

from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation
from lionfactory._os.regular import FileRefused, open_regular, read_capped, refusal
from lionfactory._os.workspace import PathRefused, Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.errors import ConfigurationError, ToolFailure
from lionfactory.tools._code_intel import CodeIntel, build_code_intel
from lionfactory.tools._models import ToolModel
from lionfactory.tools._targets import PathTargets

__all__ = ["NavItem", "NavRequest", "NavResponse", "code_nav_tool"]

MAX_FILE_BYTES = 5_000_000
"""Largest file parsed; bigger ones are refused rather than parsed for seconds."""

_LINE_CAP = 200
_NEWLINE = re.compile(r"\r\n|\r|\n")

_DESCRIPTION = """\
Navigate Python code with a type checker (ty) that follows imports across files:
- outline: the definitions in `path`.
- find_definition: where `symbol` (in `path`, at `line` if given) is defined, following
  imports into other files.
- find_references: every use of `symbol` across the workspace.
- hover: the type and documentation of `symbol`.
- diagnostics: the current type errors of `paths`.
- workspace_symbols: definitions anywhere whose name matches `query`.
Give a position as `symbol` plus an optional `line`; the column is found for you. Rows are
'path:line: text' with 1-based lines; page with offset/limit. engine='ast' reads one file's
syntax only."""

_AST_DESCRIPTION = """\
Navigate one Python file without running it (syntax only, no import resolution):
- outline: classes, functions and methods with their signatures, in source order.
  Names are dotted (Class.method); kinds are class, function, async function,
  method, async method.
- find_definition: where `symbol` (a bare name or Class.method) is defined as a
  class, function, method or assigned variable.
- find_references: every use of `symbol` as a name or attribute (x, obj.x),
  reads and writes alike, with the source line.
Lines and columns are one-based. To search many files, use the search or
ast_search tool."""

_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


class NavRequest(ToolModel):
    """Arguments of one ``code_nav`` call."""

    action: Literal[
        "outline",
        "find_definition",
        "find_references",
        "hover",
        "diagnostics",
        "workspace_symbols",
    ] = Field(
        description="'outline' lists the definitions of `path`; 'find_definition', "
        "'find_references' and 'hover' look up `symbol` in `path`; 'diagnostics' lists the "
        "current errors of `paths`; 'workspace_symbols' finds definitions matching `query`."
    )
    path: str | None = Field(
        default=None,
        description="The Python file, relative to the workspace root (every action but "
        "workspace_symbols).",
    )
    symbol: str | None = Field(
        default=None,
        description="find_definition/find_references/hover: the identifier, e.g. 'load' or "
        "'Config.load'.",
    )
    line: int | None = Field(
        default=None,
        ge=1,
        description="The 1-based line of `path` where `symbol` appears (default: where it is "
        "defined in the file, else its first use). The column is found for you.",
    )
    paths: list[str] | None = Field(
        default=None,
        max_length=50,
        description="diagnostics: the files whose current errors to list.",
    )
    query: str | None = Field(
        default=None,
        max_length=200,
        description="workspace_symbols: part of a name, e.g. 'Config'.",
    )
    engine: Literal["auto", "ty", "ast"] = Field(
        default="auto",
        description="'ty' knows types and follows imports across files; 'ast' reads one file's "
        "syntax; 'auto' uses ty when it is available.",
    )
    offset: int = Field(default=0, ge=0, description="Skip this many rows (paging).")
    limit: int = Field(default=100, ge=1, le=500, description="Return at most this many rows.")


class NavItem(ToolModel):
    """One definition or reference."""

    kind: str = Field(
        description="class, function, async function, method, async method, variable, "
        "name or attribute."
    )
    name: str = Field(description="The (dotted, for definitions) name.")
    line: int = Field(description="One-based line.")
    col: int = Field(description="One-based column, in characters.")
    signature: str | None = Field(
        default=None,
        description="The signature of a definition, the statement of a variable, or the "
        "source line of a reference.",
    )


class NavResponse(ToolModel):
    """The outcome of one ``code_nav`` call."""

    success: bool = Field(description="Whether the file could be parsed and the action ran.")
    engine: str = Field(
        default="ast", description="The engine that answered: 'ty', 'pyrefly' or 'ast'."
    )
    items: list[NavItem] = Field(
        default_factory=list,
        description="ast engine: the definitions or references, in source order (one page).",
    )
    rows: list[str] = Field(
        default_factory=list,
        description="The results as 'path:line: text' (1-based lines, as the reader shows).",
    )
    text: str | None = Field(default=None, description="hover: the type and documentation.")
    total: int | None = Field(default=None, description="How many results there are in all.")
    next_offset: int | None = Field(
        default=None, description="The offset of the next page, when there are more rows."
    )
    note: str | None = Field(default=None, description="Something to know about this answer.")
    error: str | None = Field(default=None, description="Why it failed, and what to do.")


class _NavFailure(ToolFailure):
    """A lookup that cannot be answered; the handler returns `message` as ``success=False``."""


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _LINE_CAP else text[:_LINE_CAP] + "..."


def _param(arg: ast.arg, default: ast.expr | None = None) -> str:
    text = arg.arg
    if arg.annotation is not None:
        text += f": {ast.unparse(arg.annotation)}"
    if default is not None:
        text += f" = {ast.unparse(default)}" if arg.annotation else f"={ast.unparse(default)}"
    return text


def _parameters(args: ast.arguments) -> str:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    parts = []
    for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        parts.append(_param(arg, default))
        if index == len(args.posonlyargs) - 1:
            parts.append("/")
    if args.vararg is not None:
        parts.append("*" + _param(args.vararg))
    elif args.kwonlyargs:
        parts.append("*")
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        parts.append(_param(arg, kw_default))
    if args.kwarg is not None:
        parts.append("**" + _param(args.kwarg))
    return ", ".join(parts)


def _signature(node: _Definition) -> str:
    if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(b) for b in node.bases]
        bases += [ast.unparse(k) for k in node.keywords]
        return f"class {node.name}({', '.join(bases)})" if bases else f"class {node.name}"
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{prefix} {node.name}({_parameters(node.args)}){returns}"


def _definitions(
    node: ast.AST, prefix: str, in_class: bool
) -> Iterator[tuple[str, str, _Definition]]:
    """Yield (kind, dotted name, node) for every class and function, in source order."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            name = prefix + child.name
            yield "class", name, child
            yield from _definitions(child, name + ".", True)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            kind = "method" if in_class else "function"
            if isinstance(child, ast.AsyncFunctionDef):
                kind = f"async {kind}"
            yield kind, name, child
            yield from _definitions(child, name + ".", False)
        elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            # if/try/with/for/match bodies: `if TYPE_CHECKING: def ...` still counts.
            yield from _definitions(child, prefix, in_class)


def _assigned_names(target: ast.expr) -> Iterator[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _assigned_names(element)
    elif isinstance(target, ast.Starred):
        yield from _assigned_names(target.value)


@attrs.frozen
class _Source:
    tree: ast.Module
    lines: list[str]

    def col(self, line: int, byte_offset: int) -> int:
        """One-based character column from ast's zero-based UTF-8 byte offset."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")) + 1

    def line_text(self, line: int) -> str:
        return _cut(self.lines[line - 1]) if 0 < line <= len(self.lines) else ""

    def item(self, kind: str, name: str, node: ast.AST, signature: str | None) -> NavItem:
        line, offset = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        return NavItem(
            kind=kind, name=name, line=line, col=self.col(line, offset), signature=signature
        )


def _outline(source: _Source) -> list[NavItem]:
    return [
        source.item(kind, name, node, _signature(node))
        for kind, name, node in _definitions(source.tree, "", False)
    ]


def _find_definition(source: _Source, symbol: str) -> list[NavItem]:
    items = [
        source.item(kind, name, node, _signature(node))
        for kind, name, node in _definitions(source.tree, "", False)
        if symbol in (name, node.name)
    ]
    for node in ast.walk(source.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for name in _assigned_names(target):
                if name.id == symbol:
                    items.append(source.item("variable", symbol, name, _cut(ast.unparse(node))))
    return sorted(items, key=lambda item: (item.line, item.col))


def _find_references(source: _Source, symbol: str) -> list[NavItem]:
    items = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and node.id == symbol:
            items.append(source.item("name", symbol, node, source.line_text(node.lineno)))
        elif isinstance(node, ast.Attribute) and node.attr == symbol:
            line = node.end_lineno or node.lineno
            # The attribute name ends the node; its own position is not recorded.
            end = node.end_col_offset or 0
            col = source.col(line, end - len(symbol.encode("utf-8")))
            items.append(
                NavItem(
                    kind="attribute",
                    name=symbol,
                    line=line,
                    col=col,
                    signature=source.line_text(line),
                )
            )
    return sorted(items, key=lambda item: (item.line, item.col))


# CPython keeps the depth counter of the step that turns its C syntax tree
# into `ast` objects in per-interpreter state, not per thread. When two
# threads parse at once and the interpreter switches between them mid-way
# (a garbage collection running Python code is enough), the counter of one
# is changed by the other and `ast.parse` raises "SystemError: AST
# constructor recursion depth mismatch". Parsing is serialised; it is a
# small part of a call (reading, walking and formatting run in parallel),
# and a process pool was rejected as far costlier than the parse itself.
_PARSE_LOCK = threading.Lock()


def parse_python(data: bytes, path: str) -> ast.Module:
    """`ast.parse` of `data`, one thread at a time (see `_PARSE_LOCK`).

    Raises:
        SyntaxError: the source is not valid Python.
        ValueError: it holds a NUL byte.
        RecursionError, MemoryError: it nests too deeply for the parser.
    """
    with _PARSE_LOCK:
        return ast.parse(data, filename=path)


@attrs.frozen
class _NavHandler:
    workspace: Workspace
    intel: CodeIntel | None = None

    def _parse(self, path: str) -> _Source:
        try:
            stream, _ = open_regular(self.workspace.locate(path), max_bytes=MAX_FILE_BYTES)
            with stream:
                data = read_capped(stream, path, MAX_FILE_BYTES)
        except (PathRefused, OSError, FileRefused) as exc:
            answer = refusal(
                exc, path, "give a Python file in the workspace.", too_large="use search on it."
            )
            raise _NavFailure(answer) from None
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            text = data.decode(encoding)
        except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
            raise _NavFailure(
                f"{path!r} is not readable Python source text ({exc}); is it a Python file?"
            ) from None
        try:
            tree = parse_python(data, path)
        except SyntaxError as exc:
            raise _NavFailure(
                f"{path!r} is not valid Python: {exc.msg} at line {exc.lineno}; fix the syntax "
                f"or use search instead."
            ) from None
        except ValueError as exc:  # a NUL byte in the source
            raise _NavFailure(f"{path!r} is not valid Python: {exc}.") from None
        except (RecursionError, MemoryError):
            raise _NavFailure(
                f"{path!r} nests expressions too deeply for Python's parser; use search on it."
            ) from None
        return _Source(tree=tree, lines=_NEWLINE.split(text))

    def _navigate(self, request: NavRequest) -> list[NavItem]:
        if not request.path:
            raise _NavFailure(f"{request.action} needs `path`: the Python file.")
        source = self._parse(request.path)
        if request.action == "outline":
            return _outline(source)
        if not request.symbol:
            raise _NavFailure(f"{request.action} needs a symbol, e.g. symbol='load'.")
        if request.action == "find_definition":
            return _find_definition(source, request.symbol)
        return _find_references(source, request.symbol.rpartition(".")[2])

    def _engine(self, request: NavRequest) -> str:
        """The engine that answers `request`: ``"ty"`` or ``"ast"``."""
        if request.engine == "ast" or (request.engine == "auto" and self.intel is None):
            if request.action in _SEMANTIC_ONLY:
                raise _NavFailure(
                    f"{request.action} needs the ty engine, which is "
                    + (
                        "not installed (pip install 'lionfactory[code]')."
                        if self.intel is None
                        else "not what engine='ast' asks for; use engine='auto'."
                    )
                )
            return "ast"
        if request.engine == "auto" and request.action == "outline":
            # An outline is syntax only: Python's own parser answers it
            # exactly (kinds and signatures in `items`, the precise reason a
            # file cannot be read) without a round trip to the server.
            return "ast"
        if self.intel is None or (request.engine == "ty" and self.intel.engine != "ty"):
            raise _NavFailure(
                "engine='ty' is not available here (ty is not installed, or this tool was "
                "built with engine='ast'); use engine='ast' or engine='auto'."
            )
        return self.intel.engine

    async def _semantic(self, request: NavRequest) -> NavResponse:
        from lionfactory.tools._code_nav_ty import semantic_rows

        assert self.intel is not None
        rows, text = await semantic_rows(
            self.intel,
            request.action,
            path=request.path,
            paths=request.paths,
            symbol=request.symbol,
            line=request.line,
            query=request.query,
        )
        engine = self.intel.engine
        return _page(NavResponse(success=True, engine=engine, text=text), rows, [], request)

    async def _syntactic(self, request: NavRequest, note: str | None = None) -> NavResponse:
        try:
            items = await anyio.to_thread.run_sync(self._navigate, request)
        except _NavFailure as exc:
            return NavResponse(success=False, engine="ast", error=exc.message, note=note)
        shown = request.path or ""
        rows = [f"{shown}:{i.line}: {i.kind} {i.name}: {i.signature or ''}".rstrip() for i in items]
        return _page(NavResponse(success=True, engine="ast", note=note), rows, items, request)

    async def __call__(self, request: NavRequest) -> NavResponse:
        from lionfactory.tools._code_nav_ty import SemanticFailure

        try:
            engine = self._engine(request)
        except _NavFailure as exc:
            return NavResponse(success=False, engine="ast", error=exc.message)
        if engine == "ast":
            return await self._syntactic(request)
        try:
            return await self._semantic(request)
        except PathRefused as exc:
            return NavResponse(success=False, engine=engine, error=exc.message)
        except SemanticFailure as exc:
            if exc.engine_failed and request.engine == "auto" and request.action in _BOTH:
                return await self._syntactic(request, note=f"{exc.message} Answered by ast.")
            return NavResponse(success=False, engine=engine, error=exc.message)

    async def close_branch(self, branch_id: object) -> None:
        """Shut down the language server this tool started for branch `branch_id`."""
        if self.intel is not None:
            await self.intel.close_branch(branch_id)


_SEMANTIC_ONLY = frozenset({"hover", "diagnostics", "workspace_symbols"})
_BOTH = frozenset({"outline", "find_definition", "find_references"})


def _page(
    response: NavResponse, rows: list[str], items: list[NavItem], request: NavRequest
) -> NavResponse:
    """`response` with one page of `rows` (and of `items`, which parallel them)."""
    start, stop = request.offset, request.offset + request.limit
    response.rows = rows[start:stop]
    response.items = items[start:stop]
    response.total = len(rows)
    response.next_offset = stop if stop < len(rows) else None
    return response


def code_nav_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    engine: str = "auto",
    isolation: str | Isolation = "none",
    env_policy: EnvPolicy | None = None,
    code_intel: CodeIntel | None = None,
    _server_command: Sequence[str] | None = None,
) -> Tool:
    """Build the ``code_nav`` tool.

    Args:
        workspace_root: the directory every path must stay inside; the
            current directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never read; the
            workspace defaults when None.
        engine: ``"auto"`` (the ty language server when it is installed,
            else pyrefly's, else the syntax-only ``ast`` engine), ``"ty"``
            (refuse to build without ty) or ``"ast"`` (never start a server).
        isolation: how the language server is confined: ``"none"``,
            ``"auto"``, ``"bwrap"``, ``"landlock"`` or an inherited
            `Isolation`. Whatever the mechanism, the server may write only
            its private temporary directory and gets no network.
        env_policy: which inherited environment variables the server gets.
        code_intel: the language-server pool to use, shared with the editor's
            diagnostics (the coding toolkit passes one); overrides the
            options above but `engine`.
        _server_command: private test seam: the language server's argv.

    Returns:
        The ``code_nav`` Tool. It holds one server per branch that used it;
        `Branch.aclose` ends it (``close_branch``).

    Raises:
        ValueError: the workspace root is not a directory, or an unknown engine.
        TypeError: an option of the wrong type.
        ConfigurationError: engine ``"ty"`` without ty installed, or an
            isolation that cannot work here.
    """
    if engine not in ("auto", "ty", "ast"):
        raise ValueError(f"engine must be 'auto', 'ty' or 'ast', got {engine!r}")
    if code_intel is not None and not isinstance(code_intel, CodeIntel):
        raise TypeError(f"code_intel must be a CodeIntel or None, got {code_intel!r}")
    workspace = Workspace.at(workspace_root, protected=protected_names)
    intel = None
    if engine != "ast":
        intel = code_intel or build_code_intel(
            workspace,
            isolation=isolation,
            env_policy=env_policy,
            command=_server_command,
            engine="ty" if engine == "ty" else None,
        )
        if intel is None and engine == "ty":
            raise ConfigurationError(
                "code_nav_tool(engine='ty') needs ty: pip install 'lionfactory[code]'"
            )
    return Tool(
        name="code_nav",
        description=_DESCRIPTION if intel is not None else _AST_DESCRIPTION,
        request_model=NavRequest,
        handler=_NavHandler(workspace, intel),
        response_model=NavResponse,
        hints=ToolHints.reading("Navigate Python code"),
        targets=PathTargets(workspace, ("path", "paths")),
    )
