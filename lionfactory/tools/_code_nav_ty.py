"""The semantic engine of ``code_nav``: the actions answered by a language server.

Every answer is rows of ``path:line: text`` in the reader's numbering
(1-based lines), the text being the source line at that place; a location
outside the workspace (the standard library's stubs) is shown by path only,
because the tool reads nothing outside the workspace for the model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs

from lionfactory._os.workspace import Workspace
from lionfactory.tools._code_intel import (
    CodeIntel,
    ConfigRefused,
    Server,
    _read_text,
    uri_path,
)
from lionfactory.tools._lsp import LspError, utf16_column

__all__ = ["SemanticFailure", "semantic_rows"]

MAX_HOVER_CHARS = 4000
"""Longest hover text returned (a huge docstring is cut, with a note)."""

_ROW_CAP = 200
_DIAGNOSTICS_WAIT = 5.0
_LSP_TIMEOUT = 10.0
_KINDS = {
    1: "file",
    2: "module",
    3: "namespace",
    4: "package",
    5: "class",
    6: "method",
    7: "property",
    8: "field",
    9: "constructor",
    10: "enum",
    11: "interface",
    12: "function",
    13: "variable",
    14: "constant",
    15: "string",
    16: "number",
    17: "boolean",
    18: "array",
    19: "object",
    20: "key",
    21: "null",
    22: "enum member",
    23: "struct",
    24: "event",
    25: "operator",
    26: "type parameter",
}


class SemanticFailure(Exception):
    """A semantic lookup that cannot be answered; `message` says what to do."""

    def __init__(self, message: str, *, engine_failed: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.engine_failed = engine_failed
        """The engine itself failed (not the arguments): another engine may answer."""


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _ROW_CAP else text[:_ROW_CAP] + "..."


@attrs.define(eq=False)
class _Lines:
    """Source lines of workspace files, read once per call through the workspace seam."""

    workspace: Workspace
    cache: dict[Path, list[str] | None] = attrs.field(factory=dict)

    def get(self, path: Path) -> list[str] | None:
        if path not in self.cache:
            read = _read_text(self.workspace, path)
            self.cache[path] = read[0].splitlines() if read is not None else None
        return self.cache[path]


def _position(lines: list[str], symbol: str, line: int | None) -> tuple[int, int]:
    """The (0-based line, UTF-16 column) of `symbol` in `lines` (at `line`, when given)."""
    last = symbol.rpartition(".")[2]
    if not last.isidentifier():
        raise SemanticFailure(f"symbol must be a name like 'load' or 'Config.load', got {symbol!r}")
    word = re.compile(rf"(?<![\w]){re.escape(last)}(?![\w])")
    dotted = re.compile(rf"(?<![\w]){re.escape(symbol)}(?![\w])") if "." in symbol else None

    def find(text: str) -> int | None:
        if dotted is not None and (m := dotted.search(text)):
            return m.start() + len(symbol) - len(last)
        m = word.search(text)
        return m.start() if m else None

    if line is not None:
        if not 1 <= line <= len(lines):
            raise SemanticFailure(f"line {line} is outside the file (it has {len(lines)} lines).")
        col = find(lines[line - 1])
        if col is None:
            raise SemanticFailure(
                f"{last!r} does not occur on line {line}; give the line where it appears, or "
                f"omit `line` to use its first occurrence."
            )
        return line - 1, utf16_column(lines[line - 1], col)
    # Prefer where it is defined in this file, then its first use.
    definition = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(last)}\b")
    for index, text in enumerate(lines):
        if definition.match(text):
            col = find(text)
            assert col is not None
            return index, utf16_column(text, col)
    for index, text in enumerate(lines):
        stripped = text.lstrip()
        if stripped.startswith("#"):
            continue
        col = find(text)
        if col is not None:
            return index, utf16_column(text, col)
    raise SemanticFailure(f"not_in_file:{last}")


def _locations(result: Any) -> list[tuple[str, int]]:
    """(uri, 0-based line) of a Location, Location[] or LocationLink[] result."""
    items = result if isinstance(result, list) else [result] if isinstance(result, dict) else []
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        uri = item.get("uri") or item.get("targetUri")
        rng: Any = item.get("range") or item.get("targetSelectionRange") or item.get("targetRange")
        try:
            line = int(rng["start"]["line"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(uri, str):
            found.append((uri, line))
    return found


@attrs.frozen
class _Semantic:
    intel: CodeIntel
    server: Server
    lines: _Lines

    def row(self, uri: str, line0: int, text: str | None = None) -> str:
        path = uri_path(uri)
        if path is None:
            return f"{uri}:{line0 + 1}: {text or ''}".rstrip()
        shown = self.intel.shown(path)
        if text is None:
            inside = path == self.intel.root or self.intel.root in path.parents
            source = self.lines.get(path) if inside else None
            if source is None:
                text = "" if inside else "(outside the workspace)"
            else:
                text = _cut(source[line0]) if 0 <= line0 < len(source) else ""
        return f"{shown}:{line0 + 1}: {text}".rstrip()

    async def document(self, rel: str) -> tuple[Path, str, list[str]]:
        path = self.intel.workspace.locate(rel).path
        opened = await self.intel.open(self.server, path, strict=True)
        if opened is None:
            raise SemanticFailure(
                f"{rel!r} is not a UTF-8 text file in the workspace (missing, a directory, "
                f"binary or over 5 MB); give a Python file."
            )
        uri, _, lines = opened
        return path, uri, lines

    async def at(self, rel: str, symbol: str, line: int | None, method: str) -> list[str]:
        _, uri, lines = await self.document(rel)
        try:
            line0, unit = _position(lines, symbol, line)
        except SemanticFailure as exc:
            if not exc.message.startswith("not_in_file:"):
                raise
            if method != "textDocument/definition":
                raise SemanticFailure(
                    f"{symbol!r} does not occur in {rel!r}; give the file that uses it, or use "
                    f"find_definition / workspace_symbols to find where it lives."
                ) from None
            return await self.symbols(symbol.rpartition(".")[2], exact=True)
        params: dict[str, Any] = {
            "textDocument": {"uri": uri},
            "position": {"line": line0, "character": unit},
        }
        if method == "textDocument/references":
            params["context"] = {"includeDeclaration": True}
        result = await self.server.client.request(method, params, timeout=_LSP_TIMEOUT)
        rows = [self.row(u, n) for u, n in _locations(result)]
        return list(dict.fromkeys(rows))

    async def hover(self, rel: str, symbol: str, line: int | None) -> str:
        _, uri, lines = await self.document(rel)
        try:
            line0, unit = _position(lines, symbol, line)
        except SemanticFailure as exc:
            if exc.message.startswith("not_in_file:"):
                raise SemanticFailure(f"{symbol!r} does not occur in {rel!r}.") from None
            raise
        result = await self.server.client.request(
            "textDocument/hover",
            {"textDocument": {"uri": uri}, "position": {"line": line0, "character": unit}},
            timeout=_LSP_TIMEOUT,
        )
        text = _hover_text(result)
        if len(text) > MAX_HOVER_CHARS:
            text = text[:MAX_HOVER_CHARS] + f"\n[hover cut at {MAX_HOVER_CHARS:,} characters]"
        return text

    async def outline(self, rel: str) -> list[str]:
        _, uri, lines = await self.document(rel)
        result = await self.server.client.request(
            "textDocument/documentSymbol", {"textDocument": {"uri": uri}}, timeout=_LSP_TIMEOUT
        )
        rows: list[str] = []

        def walk(items: Any, prefix: str) -> None:
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict):
                    continue
                name = str(item.get("name", ""))
                kind = _KINDS.get(item.get("kind", 0), "symbol")
                rng: Any = item.get("selectionRange") or item.get("range")
                if rng is None and isinstance(item.get("location"), dict):
                    rng = item["location"].get("range")
                try:
                    line0 = int(rng["start"]["line"])
                except (KeyError, TypeError, ValueError):
                    continue
                if kind in ("variable", "constant") and prefix:
                    continue  # locals and attributes: the outline lists definitions
                source = _cut(lines[line0]) if 0 <= line0 < len(lines) else ""
                rows.append(f"{self.intel.shown(self.intel.root / rel)}:{line0 + 1}: {source}")
                walk(item.get("children"), f"{prefix}{name}.")

        walk(result, "")
        return rows

    async def symbols(self, query: str, *, exact: bool = False) -> list[str]:
        result = await self.server.client.request(
            "workspace/symbol", {"query": query}, timeout=_LSP_TIMEOUT
        )
        rows = []
        for item in result if isinstance(result, list) else []:
            if not isinstance(item, dict):
                continue
            name = str(item.get("name", ""))
            if exact and name != query:
                continue
            location = item.get("location")
            found = _locations(location)
            if not found:
                continue
            uri, line0 = found[0]
            kind = _KINDS.get(item.get("kind", 0), "symbol")
            if exact:
                rows.append(self.row(uri, line0))
            else:
                rows.append(self.row(uri, line0, f"{kind} {name}"))
        return rows

    async def diagnostics(self, paths: list[str]) -> list[str]:
        rows = []
        for rel in paths:
            path = self.intel.workspace.locate(rel).path
            found, fresh = await self.intel.diagnostics(
                self.server, path, timeout=_DIAGNOSTICS_WAIT
            )
            if not fresh:
                rows.append(f"{rel}:1: (the engine did not report in time; ask again)")
            rows += [
                f"{d.path}:{d.line}: {d.severity}[{d.code}] {d.message} (column {d.column})"
                for d in found
            ]
        return rows


def _hover_text(result: Any) -> str:
    if not isinstance(result, dict):
        return ""
    contents = result.get("contents")
    parts = contents if isinstance(contents, list) else [contents]
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("value"), str):
            texts.append(part["value"])
    return "\n".join(texts).strip()


async def semantic_rows(
    intel: CodeIntel,
    action: str,
    *,
    path: str | None,
    paths: list[str] | None,
    symbol: str | None,
    line: int | None,
    query: str | None,
) -> tuple[list[str], str | None]:
    """(rows, hover text) of one semantic ``code_nav`` action.

    Raises:
        SemanticFailure: bad arguments, or the engine could not answer.
    """
    try:
        server = await intel.server()
        engine = _Semantic(intel, server, _Lines(intel.workspace))
        await intel.refresh(server)
        if action == "workspace_symbols":
            if not query:
                raise SemanticFailure("workspace_symbols needs `query`, e.g. query='Config'.")
            return await engine.symbols(query), None
        if action == "diagnostics":
            wanted = list(paths or ([path] if path else []))
            if not wanted:
                raise SemanticFailure("diagnostics needs `paths` (or `path`): the files to check.")
            return await engine.diagnostics(wanted), None
        if not path:
            raise SemanticFailure(f"{action} needs `path`: the Python file.")
        if action == "outline":
            return await engine.outline(path), None
        if not symbol:
            raise SemanticFailure(f"{action} needs a symbol, e.g. symbol='load'.")
        if action == "hover":
            return [], await engine.hover(path, symbol, line)
        method = (
            "textDocument/definition" if action == "find_definition" else "textDocument/references"
        )
        return await engine.at(path, symbol, line, method), None
    except LspError as exc:
        # A refused configuration stays refused until someone fixes it: no retry.
        then = (
            "use engine='ast' meanwhile"
            if isinstance(exc, ConfigRefused)
            else "retry, or use engine='ast'"
        )
        raise SemanticFailure(
            f"the {intel.engine} engine could not answer ({exc}); {then}.",
            engine_failed=True,
        ) from None
