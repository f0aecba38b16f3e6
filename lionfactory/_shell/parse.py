"""Every simple command of a shell script, read by a real POSIX-shell grammar.

A policy that reads a script must see every program it would run: the ones
joined by ``&&``, ``||``, ``;`` and ``|``, the ones inside subshells, ``{
...; }`` groups, loops, conditionals and function bodies, and the ones inside
command substitutions (``$(...)``, backticks, ``<(...)``), wherever those
appear, in an argument, a double-quoted string, an assignment, a redirect
target or a here-document. Cutting a script at operators by hand misses some
of these; `simple_commands` uses tree-sitter's bash grammar (MIT licensed,
maintained, the one editors use), which parses the whole language.

The parser is loaded on first use, so importing lionfactory does not pay for it.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

__all__ = ["MAX_COMMAND_CHARS", "ShellSyntaxError", "SimpleCommand", "simple_commands"]

# Here rather than in the bash tool: the policies that check a command before
# it runs share the cap without importing the tool.
MAX_COMMAND_CHARS = 32_768
"""Longest command a call may send.

Linux refuses any single argument longer than 131,072 bytes
(``MAX_ARG_STRLEN``); 32,768 characters stay under that even when every
character takes four bytes in UTF-8, so no command the kernel would run is
refused for its length. Content longer than that belongs in a file written
with the editor, not in a command line; and the cap bounds the work of
checking a command (splitting, parsing, operator scan, policy hooks) before it
runs.
"""


class ShellSyntaxError(ValueError):
    """The script is not valid shell; `message` says where, for a model to fix it.

    Attributes:
        message: the explanation.
        offset: the character offset of the first error.
    """

    def __init__(self, message: str, offset: int) -> None:
        self.message = message
        self.offset = offset
        super().__init__(message)


@attrs.frozen
class SimpleCommand:
    """One simple command of a script: the program, its arguments, what surrounds it.

    Attributes:
        words: the program and its arguments with quotes removed (``'a b'``
            is ``a b``); an expansion (``$x``, ``$(...)``, ``*`` is kept
            literally, globs being words too) keeps its source text.
        assignments: the ``NAME=value`` words before the program, as written.
        redirects: the targets of its redirects (``> out.txt`` gives
            ``out.txt``), and of any redirect around the list it is part of.
        text: the command's source text.
        dynamic: a word holds an expansion or substitution whose value is
            known only when the script runs (``$x``, ``$(...)``, ``${x}``).
        substitution: the command runs inside a command or process
            substitution (its output becomes part of another command).
        stdin: the here-documents and here-strings fed to its standard
            input (or to the list it is part of), as written; a shell
            reading one runs it as a script.
        nesting: how many command or process substitutions it runs inside
            (0 for a command of the script itself).
    """

    words: tuple[str, ...]
    assignments: tuple[str, ...] = ()
    redirects: tuple[str, ...] = ()
    text: str = ""
    dynamic: bool = False
    substitution: bool = False
    stdin: tuple[str, ...] = ()
    nesting: int = 0

    @property
    def program(self) -> str | None:
        """The first word (the program), or None for a command of assignments only."""
        return self.words[0] if self.words else None


_EXPANSIONS = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
    }
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# A backslash before a newline is a line continuation: the shell removes
# both (outside single quotes), so `r\<newline>m` is the word `rm`.
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPE_DOUBLE = re.compile(r'\\([$`"\\\n])')
_CONTINUATIONS = re.compile(r"(?:\\\n)+")
_UNESCAPE_HEREDOC = re.compile(r"\\([$`\\\n])")


@functools.cache
def _parser() -> Parser:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def simple_commands(script: str) -> tuple[SimpleCommand, ...]:
    """Every simple command `script` would run, outermost first, in source order.

    Args:
        script: a POSIX shell (bash) script.

    Returns:
        The commands, including those in pipelines, lists, subshells, groups,
        loops, conditionals, function bodies and command substitutions.

    Raises:
        ShellSyntaxError: the script does not parse (an unclosed quote or
            parenthesis, a stray operator); its message gives the position.
    """
    return _simple_commands(script, 0)


def _simple_commands(script: str, nesting: int) -> tuple[SimpleCommand, ...]:
    """`simple_commands` of a script that runs `nesting` substitutions deep."""
    data = script.encode("utf-8", "surrogateescape")
    tree = _parser().parse(data)
    root = tree.root_node
    if root.has_error:
        offset = _first_error(root)
        char = len(data[:offset].decode("utf-8", "replace"))
        near = script[max(0, char - 20) : char + 20]
        raise ShellSyntaxError(
            f"the command is not valid shell syntax near character {char} ({near!r}): "
            f"check that every quote, parenthesis and brace is closed and that no operator "
            f"stands alone",
            char,
        )
    found: list[SimpleCommand] = []
    # An explicit stack, not recursion: nesting depth is the script's to choose.
    stack: list[tuple[Node, tuple[str, ...], int, tuple[str, ...]]] = [(root, (), nesting, ())]
    while stack:
        node, redirects, nesting, stdin = stack.pop()
        kind = node.type
        children = node.children
        if kind == "redirected_statement":
            targets = tuple(
                _redirect_target(child, data) for child in children if child.type in _REDIRECTS
            )
            redirects = (*redirects, *(t for t in targets if t is not None))
            stdin = (*stdin, *_stdin_texts(children, data))
        elif kind == "command":
            found.append(_command(node, data, redirects, nesting, stdin))
        elif kind == "heredoc_body" and _expands(node):
            found.extend(_heredoc_backticks(node, data, nesting + 1))
        if kind in _SUBSTITUTIONS:
            nesting, redirects, stdin = nesting + 1, (), ()
        if kind == "pipeline":
            stack.extend(_piped(children, data, redirects, nesting, stdin))
            continue
        stack.extend((child, redirects, nesting, stdin) for child in reversed(children))
    return tuple(found)


# Programs whose output is their arguments: piped into a shell, those run.
_PRINTERS = frozenset({"echo", "printf"})


def _piped(
    children: list[Node],
    data: bytes,
    redirects: tuple[str, ...],
    nesting: int,
    stdin: tuple[str, ...],
) -> list[tuple[Node, tuple[str, ...], int, tuple[str, ...]]]:
    """A pipeline's stages for the walk, each fed what an ``echo``/``printf`` before it prints.

    ``echo 'rm -rf d' | sh`` runs ``rm -rf d``: the text an echo or printf
    stage prints (its arguments joined by spaces) is standard input of the
    next stage, as a here-string would be.
    """
    stages: list[tuple[Node, tuple[str, ...], int, tuple[str, ...]]] = []
    fed: tuple[str, ...] = ()
    for child in children:
        stages.append((child, redirects, nesting, (*fed, *stdin) if fed else stdin))
        if not child.is_named:
            continue  # the `|` between two stages
        fed = ()
        if child.type == "command":
            words = [
                _word(c, data)[0] for c in child.children if c.is_named and c.type != "comment"
            ]
            if words and words[0].rsplit("/", 1)[-1] in _PRINTERS:
                printed = [w for w in words[1:] if not (w.startswith("-") and len(w) <= 3)]
                fed = (" ".join(printed),)
    stages.reverse()
    return stages


def _expands(body: Node) -> bool:
    """Whether a here-document's body is expanded: its delimiter word is unquoted."""
    redirect = body.parent
    if redirect is None:
        return False
    for child in redirect.children:
        if child.type == "heredoc_start":
            return not any(q in (child.text or b"") for q in (b"'", b'"', b"\\"))
    return False


def _heredoc_backticks(body: Node, data: bytes, nesting: int) -> list[SimpleCommand]:
    """The commands of the backtick substitutions in an expanded here-document.

    The grammar reads ``$(...)`` inside a here-document but leaves backticks
    as text, though a shell runs them: they are found here, in the text
    between the parts the grammar did read, and their scripts parsed.
    Each is one substitution deeper than the here-document (`nesting`); past
    a bound the scripts are not parsed (their commands come back with that
    nesting), so backticks inside backticks cannot recurse without end.
    """
    gaps: list[tuple[int, int]] = []
    start = body.start_byte
    for child in body.children:
        if child.type != "heredoc_content":
            gaps.append((start, child.start_byte))
            start = child.end_byte
    gaps.append((start, body.end_byte))
    found: list[SimpleCommand] = []
    for begin, end in gaps:
        text = data[begin:end].decode("utf-8", "surrogateescape")
        at = len(data[:begin].decode("utf-8", "replace"))
        for inner in _backtick_scripts(text, at):
            if nesting > _MAX_BACKTICK_NESTING:
                found.append(
                    SimpleCommand(words=(), text=inner, substitution=True, nesting=nesting)
                )
                continue
            found.extend(
                attrs.evolve(c, substitution=True) for c in _simple_commands(inner, nesting)
            )
    return found


# Deeper than any policy reads (their bound is 8): a policy refuses a command
# nested this deep, and stopping here keeps the parse from recursing further.
_MAX_BACKTICK_NESTING = 16


def _backtick_scripts(text: str, offset: int) -> list[str]:
    scripts: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char != "`":
            index += 1
            continue
        close = index + 1
        while close < len(text) and text[close] != "`":
            close += 2 if text[close] == "\\" else 1
        if close >= len(text):
            raise ShellSyntaxError(
                f"the command is not valid shell syntax: a backtick in a here-document at "
                f"character {offset + index} is never closed; close it or write it as \\`",
                offset + index,
            )
        # Inside backticks a backslash quotes only `, \ and $.
        scripts.append(re.sub(r"\\([`\\$])", r"\1", text[index + 1 : close]))
        index = close + 1
    return scripts


def _first_error(root: Node) -> int:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            return int(node.start_byte)
        stack.extend(reversed(node.children))
    return int(root.start_byte)


def _text(node: Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")


def _stdin_texts(children: list[Node], data: bytes) -> list[str]:
    r"""The here-document bodies and here-string words among redirect nodes, as fed.

    An expanded here-document (unquoted delimiter) reaches the program with
    its escapes undone (``\$``, ``\```, ``\\`` and line continuations),
    as the shell feeds it; its substitutions keep their text.
    """
    texts: list[str] = []
    for child in children:
        if child.type == "heredoc_redirect":
            for body in child.children:
                if body.type == "heredoc_body":
                    text = _heredoc_text(child, body, data)
                    texts.append(_UNESCAPE_HEREDOC.sub(_unescape, text) if _expands(body) else text)
        elif child.type == "herestring_redirect":
            texts.extend(_word(c, data)[0] for c in child.children if c.is_named)
    return texts


def _heredoc_text(redirect: Node, body: Node, data: bytes) -> str:
    r"""A here-document's whole body, from the line after its redirect to its delimiter.

    The grammar reads a body whose first line starts with a backslash as
    words of the redirect (``bash <<'E'`` then ``\rm -rf d``) and leaves
    the body node without that line; the text up to the delimiter is what
    the program is fed, so it is taken from there.
    """
    start, end = body.start_byte, body.end_byte
    for child in redirect.children:
        if child.type == "heredoc_end":
            end = max(end, child.start_byte)
        elif (
            child.type not in ("<<", "<<-", "heredoc_start", "heredoc_body")
            and data[child.start_byte : child.start_byte + 1] == b"\n"
        ):
            start = min(start, child.start_byte + 1)
    return data[start:end].decode("utf-8", "surrogateescape")


def _command(
    node: Node, data: bytes, redirects: tuple[str, ...], nesting: int, stdin: tuple[str, ...]
) -> SimpleCommand:
    words: list[str] = []
    assignments: list[str] = []
    own: list[str] = []
    dynamic = False
    end = -1  # where the last word ended
    for child in node.children:
        kind = child.type
        if kind == "variable_assignment":
            assignments.append(_text(child, data))
        elif kind in _REDIRECTS:
            target = _redirect_target(child, data)
            if target is not None:
                own.append(target)
        elif child.is_named and kind != "comment":
            value, varies = _word(child, data)
            gap = data[end : child.start_byte] if words else b""
            if gap and _CONTINUATIONS.fullmatch(gap.decode("utf-8", "surrogateescape")):
                # The grammar splits a word at a line continuation, which
                # the shell removes: `r\<newline>m -rf d` runs `rm`.
                words[-1] += value
            else:
                words.append(value)
            end = child.end_byte
            dynamic = dynamic or varies
    return SimpleCommand(
        words=tuple(words),
        assignments=tuple(assignments),
        redirects=(*own, *redirects),
        text=_text(node, data),
        dynamic=dynamic,
        substitution=nesting > 0,
        stdin=(*_stdin_texts(node.children, data), *stdin),
        nesting=nesting,
    )


def _redirect_target(node: Node, data: bytes) -> str | None:
    destination = node.child_by_field_name("destination")
    if destination is None:
        return None
    return _word(destination, data)[0]


def _word(node: Node, data: bytes) -> tuple[str, bool]:
    """A word's value with quoting removed, and whether it holds an expansion."""
    kind = node.type
    if kind == "command_name":
        parts = [_word(child, data) for child in node.children]
        return "".join(p for p, _ in parts), any(v for _, v in parts)
    if kind in _EXPANSIONS:
        return _text(node, data), True
    if kind == "raw_string":
        return _text(node, data)[1:-1], False
    if kind == "ansi_c_string":
        return _ansi_c(_text(node, data)[2:-1]), False
    if kind == "string":
        return _double_quoted(node, data)
    if kind in ("concatenation", "translated_string"):
        pieces = [_word(child, data) for child in node.children if child.is_named]
        if kind == "translated_string":
            return _word(node.children[-1], data) if node.children else ("", False)
        return "".join(p for p, _ in pieces), any(v for _, v in pieces)
    if kind == "word":
        return _UNESCAPE.sub(_unescape, _text(node, data)), False
    return _text(node, data), False


def _double_quoted(node: Node, data: bytes) -> tuple[str, bool]:
    # The string's bytes between its quotes, with each expansion's text kept
    # and the escapes a double quote honours (\$ \` \" \\ newline) undone.
    inner_start, inner_end = node.start_byte + 1, node.end_byte - 1
    pieces: list[str] = []
    varies = False
    position = inner_start
    for child in node.children:
        if child.type in _EXPANSIONS:
            literal = data[position : child.start_byte].decode("utf-8", "surrogateescape")
            pieces.append(_UNESCAPE_DOUBLE.sub(_unescape, literal))
            pieces.append(_text(child, data))
            position = child.end_byte
            varies = True
    literal = data[position:inner_end].decode("utf-8", "surrogateescape")
    pieces.append(_UNESCAPE_DOUBLE.sub(_unescape, literal))
    return "".join(pieces), varies


def _unescape(match: re.Match[str]) -> str:
    """An escaped character's value: itself, or nothing for a line continuation."""
    char = match.group(1)
    return "" if char == "\n" else char


_ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b"}
_ANSI_SIMPLE |= {"E": "\x1b", "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|c.|[0-7]{1,3}|.)", re.DOTALL
)


def _ansi_c(body: str) -> str:
    r"""The value of a ``$'...'`` string, as bash computes it (``$'\u0072m'`` is ``rm``)."""

    def replace(match: re.Match[str]) -> str:
        code: str = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            value = int(code[1:], 16)
            # Past the last code point bash prints the escape as written.
            return chr(value) if value <= 0x10FFFF else "\\" + code
        if code[0] == "c" and len(code) == 2:
            return chr(ord(code[1]) & 0x1F)  # a control character, as bash's \cX
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        return _ANSI_SIMPLE.get(code, "\\" + code)

    return _ANSI_ESCAPE.sub(replace, body)
