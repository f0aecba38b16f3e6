r"""Where an edit lands: exact matching, tolerant matching with proof, and refusals.

Pure functions over bytes and text, no I/O. `replace` is the one entry point
the editor's actions (``edit``, ``multi_edit``, patch hunks) go through:

1. **Exact.** ``old_string`` is searched in the file's bytes. A match may
   never start or end between the CR and the LF of a CRLF line ending: in a
   CRLF file an ``old_string`` starting with ``"\\n"`` would otherwise match
   inside a blank line's ``"\\r\\n"`` and leave ``"\\r\\r\\n"`` behind. In a
   file that uses CRLF throughout, an LF ``old_string`` is matched as CRLF
   and the new lines get CRLF too.
2. **Tolerant, applied only with proof.** When the exact text is nowhere,
   ``old_string`` is matched line by line under looser comparisons, each one
   also ignoring line endings: trailing whitespace; a uniform indentation
   shift (re-indenting ``new_string`` by the file's real offset), with tabs
   and spaces mapped between the model's indentation unit and the file's;
   Unicode look-alikes (curly quotes, dashes, no-break and other spaces) read
   as their ASCII forms. A tolerant match is applied only when it is the
   **only** place that matches under that comparison, the replacement can be
   written in the file's own conventions (its indentation, its line ending,
   the quote and dash characters it had where the model wrote look-alikes,
   its exact context lines), and, for a Python file that parsed before, the
   result still parses. Never edit-distance matching: "almost the same
   text" is exactly how an edit lands in the wrong place.
3. **Refusals that show the real text.** No match: the window of the file
   most like ``old_string``, numbered as the reader numbers it, the first
   line that differs marked, and the invisible difference named (tab or
   spaces, trailing space, CR, no-break space, look-alike quotes). Several
   matches: every matching line, and the advice to add context.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import math
import re
from collections.abc import Callable, Sequence

import attrs

__all__ = [
    "MAX_TOLERANT_BYTES",
    "Applied",
    "Refused",
    "normalise_lookalikes",
    "python_parses",
    "replace",
]

MAX_TOLERANT_BYTES = 8 * 1024 * 1024
"""Files up to this size get tolerant matching and a near-miss window when refused.

Beyond it a refusal keeps the cheap whitespace hint: splitting a 50 MB file
into lines and comparing them under several rules would cost seconds and
hundreds of megabytes for an edit the model can simply retry exactly.
"""

_MAX_LISTED = 100
_WINDOW_LINES = 12
_DIFFLIB_MAX_LINES = 2_000
_NUMBERED = re.compile(r"^\s*\d+\t")

# One character for one character, so a normalised text has the same
# offsets as the original and a match found in it is a match in the file.
_LOOKALIKES = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u02bc", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    **dict.fromkeys(
        "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a", " "
    ),
    **dict.fromkeys("\u202f\u205f\u3000", " "),
}
_LOOKALIKE_TABLE = str.maketrans(_LOOKALIKES)


def normalise_lookalikes(text: str) -> str:
    """`text` with Unicode look-alikes of quotes, dashes and spaces as ASCII (same length)."""
    # Most source lines are ASCII; `isascii` is far cheaper than `translate`.
    return text if text.isascii() else text.translate(_LOOKALIKE_TABLE)


@attrs.frozen
class Applied:
    """An edit that found its place.

    Attributes:
        data: the file's complete new bytes.
        site: the byte offset where the (first) replacement starts in `data`.
        length: the byte length of that replacement.
        count: how many places were replaced.
        matched: the rule that located it: "exact", "trailing_whitespace",
            "indent", "tabs", "line_endings" or "unicode".
    """

    data: bytes
    site: int
    length: int
    count: int
    matched: str


@attrs.frozen
class Refused:
    """An edit that was not applied, and why (text for the model)."""

    message: str


def python_parses(text: str, name: str) -> bool:
    """Whether `text` compiles as Python source (to an AST only; nothing runs)."""
    try:
        compile(text, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def is_python(name: str) -> bool:
    return name.endswith((".py", ".pyi"))


# --- exact ----------------------------------------------------------------------


def _exact_sites(data: bytes, needle: bytes) -> tuple[list[int], bool]:
    """Start offsets of `needle` in `data` that split no CRLF, non-overlapping, in order.

    And whether they are every occurrence ``bytes.replace`` would replace:
    True when no occurrence was passed over for splitting a CRLF. (Comparing
    their number with ``data.count(needle)`` cost one more scan of the file,
    and could be fooled: a passed-over occurrence and an overlapping site
    that ``count`` does not see make the numbers equal.)
    """
    sites: list[int] = []
    every = True
    starts_lf = needle.startswith(b"\n")
    ends_cr = needle.endswith(b"\r")
    start = data.find(needle)
    while start >= 0:
        end = start + len(needle)
        bad = (starts_lf and start > 0 and data[start - 1] == 0x0D) or (
            ends_cr and data[end : end + 1] == b"\n"
        )
        if bad:
            every = False
            start = data.find(needle, start + 1)
            continue
        sites.append(start)
        start = data.find(needle, end)
    return sites, every


def _uniform_crlf(data: bytes) -> bool:
    lf = data.count(b"\n")
    return lf > 0 and lf == data.count(b"\r\n")


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _listed(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:_MAX_LISTED])
    return shown + (f", ... ({len(numbers)} in all)" if len(numbers) > _MAX_LISTED else "")


def _several(count: int, lines: Sequence[int], shown: str, how: str = "") -> Refused:
    return Refused(
        f"old_string occurs {count} times in {shown!r}{how} (lines {_listed(lines)}); include "
        f"more surrounding lines to make it unique, or set replace_all=true to replace every "
        f"occurrence."
    )


def _encoded(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def replace(data: bytes, old: str, new: str, *, replace_all: bool, shown: str) -> Applied | Refused:
    """Replace `old` with `new` in the UTF-8 file content `data`, or say why not.

    Args:
        data: the file's bytes (valid UTF-8).
        old: the text to find (non-empty).
        new: its replacement.
        replace_all: replace every occurrence instead of requiring one.
        shown: the file's path as the model wrote it (for messages; its
            suffix tells whether the file is Python).
    """
    if not old:
        return Refused("old_string is empty; give the exact text to replace.")
    new_b = _encoded(new)
    if new_b is None:
        return Refused("new_string cannot be encoded as UTF-8 (surrogates not allowed); fix it.")
    # Looking for one byte first: a two-byte search of a file without CR
    # costs seven times as much (60 ms in a 50 MiB file).
    crlf = b"\r" in data and _uniform_crlf(data)
    attempts = [(old, new)]
    if crlf and "\n" in old and "\r" not in old:
        # The model writes "\n"; a file that uses CRLF throughout keeps CRLF.
        attempts.append((_to_crlf(old), _to_crlf(new)))
    for old_try, new_try in attempts:
        old_b = _encoded(old_try)
        if old_b is None:
            break
        sites, every = _exact_sites(data, old_b)
        if not sites:
            continue
        if crlf and "\n" in new_try and "\r" not in old_try:
            new_try = _to_crlf(new_try)
        if len(sites) > 1 and not replace_all:
            return _several(len(sites), [_line_of(data, s) for s in sites], shown)
        return _splice(data, sites, len(old_b), new_try.encode("utf-8"), every)
    if len(data) > MAX_TOLERANT_BYTES:
        return Refused(_cheap_not_found(data.decode("utf-8"), old, shown))
    text = data.decode("utf-8")
    outcome = _tolerant(text, old, new, replace_all=replace_all, shown=shown)
    if isinstance(outcome, Refused):
        return outcome
    if outcome is None:
        return Refused(near_miss(text, old, shown))
    return outcome


def _to_crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _splice(data: bytes, sites: list[int], old_len: int, new_b: bytes, every: bool) -> Applied:
    if every:
        # Every raw occurrence is a valid site: one bytes.replace, one copy
        # of the file (a join of slices would hold two more).
        count = len(sites)
        return Applied(
            data=data.replace(data[sites[0] : sites[0] + old_len], new_b, count),
            site=sites[0],
            length=len(new_b),
            count=count,
            matched="exact",
        )
    parts: list[bytes] = []
    last = 0
    for site in sites:
        parts.append(data[last:site])
        parts.append(new_b)
        last = site + old_len
    parts.append(data[last:])
    return Applied(
        data=b"".join(parts), site=sites[0], length=len(new_b), count=len(sites), matched="exact"
    )


# --- the file as lines ----------------------------------------------------------


@attrs.frozen
class _Lines:
    """A text split at its line feeds: each line's body, ending and offsets."""

    text: str
    bodies: list[str]
    endings: list[str]
    starts: list[int]

    @classmethod
    def of(cls, text: str) -> _Lines:
        bodies: list[str] = []
        endings: list[str] = []
        starts: list[int] = []
        pos = 0
        pieces = text.split("\n")
        final = len(pieces) - 1
        for index, piece in enumerate(pieces):
            if index == final:
                if not piece:
                    break  # the text ends with a line feed: no further line
                bodies.append(piece)
                endings.append("")
            elif piece.endswith("\r"):
                bodies.append(piece[:-1])
                endings.append("\r\n")
            else:
                bodies.append(piece)
                endings.append("\n")
            starts.append(pos)
            pos += len(piece) + 1
        if bodies and bodies[0].startswith("\ufeff"):
            # The byte-order mark belongs to the file, not to its first line.
            bodies[0] = bodies[0][1:]
            starts[0] += 1
        return cls(text, bodies, endings, starts)

    def body_end(self, index: int) -> int:
        return self.starts[index] + len(self.bodies[index])

    def ending(self) -> str:
        """The file's own line ending: the most common one (LF for a one-line file)."""
        crlf = self.endings.count("\r\n")
        return "\r\n" if crlf > self.endings.count("\n") else "\n"


@attrs.frozen
class _Old:
    """``old_string`` (or ``new_string``) as lines, and whether it starts/ends with a line break."""

    lines: list[str]
    lead: bool
    trail: bool

    @classmethod
    def of(cls, text: str) -> _Old:
        text = text.replace("\r\n", "\n")
        lead = text.startswith("\n")
        trail = text.endswith("\n") and len(text) > 1
        core = text[1 if lead else 0 : len(text) - 1 if trail else len(text)]
        return cls(core.split("\n"), lead, trail)


def _indent(body: str) -> str:
    return body[: len(body) - len(body.lstrip(" \t"))]


def _columns(ws: str, unit: int) -> int:
    col = 0
    for char in ws:
        col = (col // unit + 1) * unit if char == "\t" else col + 1
    return col


@attrs.frozen
class _Shift:
    """How the model's indentation maps to the file's in one matched window."""

    unit: int
    offset: int
    tabs: bool  # the file indents with tabs

    def render(self, body: str) -> str | None:
        """A new line re-indented for the file; None when it would go below column 0."""
        if not body.strip():
            return ""
        ws = _indent(body)
        target = _columns(ws, self.unit) + self.offset
        if target < 0:
            return None
        if self.tabs:
            lead = "\t" * (target // self.unit) + " " * (target % self.unit)
        else:
            lead = " " * target
        return lead + body[len(ws) :]


_UNITS = (4, 8, 2, 3, 1)


def _space_unit(indents: list[str]) -> int | None:
    """The indentation unit of space-indented lines (the gcd of their widths), if clear."""
    width = 0
    for ws in indents:
        if ws and "\t" not in ws:
            width = math.gcd(width, len(ws))
    return width if width in (2, 3, 4, 8) else None


def _shifts(pairs: list[tuple[str, str]], new_lines: list[str]) -> list[_Shift]:
    """The consistent mappings of the model's indentation to the file's, for one window.

    Spaces only: one shift (the unit plays no part). With tabs on one side,
    each tab is one indentation unit of the other side; the unit is the one
    under which every line pair differs by the same number of columns,
    preferring no shift at all and then the space side's own unit.
    """
    filled = [(f, o) for f, o in pairs if f.strip() and o.strip()]
    if not filled:
        return [_Shift(4, 0, False)]
    file_tabs = any("\t" in _indent(f) for f, _ in filled)
    if not any("\t" in _indent(f) + _indent(o) for f, o in filled):
        offsets = {len(_indent(f)) - len(_indent(o)) for f, o in filled}
        return [_Shift(4, offsets.pop(), False)] if len(offsets) == 1 else []
    found: list[_Shift] = []
    for unit in _UNITS:
        offsets = {_columns(_indent(f), unit) - _columns(_indent(o), unit) for f, o in filled}
        if len(offsets) == 1:
            found.append(_Shift(unit, offsets.pop(), file_tabs))
    unshifted = [s for s in found if s.offset == 0]
    found = unshifted or found
    if len(found) > 1:
        side = [_indent(f) for f, _ in filled] if not file_tabs else []
        side += [_indent(o) for _, o in filled] + [_indent(n) for n in new_lines]
        side_unit = _space_unit(side)
        preferred = [s for s in found if s.unit == side_unit]
        found = preferred or found
    return found


# --- tolerant matching ----------------------------------------------------------


@attrs.frozen
class _Rule:
    name: str
    key_file: Callable[[str], str]
    key_old: Callable[[str], str]
    indentation: bool  # the rule compares lines without their indentation
    lookalikes: bool


def _rstrip(body: str) -> str:
    return body.rstrip(" \t")


def _strip(body: str) -> str:
    return body.strip(" \t")


def _lookalike_strip(body: str) -> str:
    return normalise_lookalikes(body).strip(" \t")


_RULES = (
    _Rule("trailing_whitespace", _rstrip, _rstrip, indentation=False, lookalikes=False),
    _Rule("indent", _strip, _strip, indentation=True, lookalikes=False),
    _Rule("unicode", _lookalike_strip, _lookalike_strip, indentation=True, lookalikes=True),
)


@attrs.frozen
class _Site:
    """One tolerant match: the window and the replacement text in the file's conventions."""

    first: int  # index of the window's first line
    start: int  # text offset where the replaced region starts
    end: int
    replacement: str
    matched: str


def _windows(file_keys: list[str], old_keys: list[str]) -> list[int]:
    count = len(old_keys)
    head = old_keys[0]
    out = []
    for index in range(len(file_keys) - count + 1):
        if file_keys[index] == head and file_keys[index : index + count] == old_keys:
            out.append(index)
    return out


class _CannotRender(Exception):
    """The replacement cannot be written in the file's conventions; holds the reason."""


def _char_map(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Which look-alike the model wrote stands for which character of the file."""
    votes: dict[str, dict[str, int]] = {}
    for file_body, old_body in pairs:
        f, o = normalise_lookalikes(file_body), normalise_lookalikes(old_body)
        fs, os_ = file_body.strip(" \t\u00a0"), old_body.strip(" \t\u00a0")
        if f.strip(" \t") != o.strip(" \t") or len(fs) != len(os_):
            continue
        for fc, oc in zip(fs, os_, strict=True):
            if fc != oc:
                votes.setdefault(oc, {}).setdefault(fc, 0)
                votes[oc][fc] += 1
    return {oc: max(targets, key=lambda c: targets[c]) for oc, targets in votes.items()}


def _build(lines: _Lines, first: int, old: _Old, new: _Old, rule: _Rule) -> tuple[str, str] | None:
    """The window's replacement text and the precise rule name, or None if it cannot be proven.

    Raises:
        _CannotRender: see `_render`.
    """
    rendered = _render(lines, first, old.lines, new.lines, rule)
    if rendered is None:
        return None
    out, name = rendered
    ending = lines.endings[first] or lines.ending()
    text = ending.join(out)
    if new.lead:
        text = ending + text
    if new.trail:
        text += ending
    if new.lines == [""] and not new.lead and not new.trail:
        text = ""
    return text, name


def _render(
    lines: _Lines, first: int, old_lines: list[str], new_lines: list[str], rule: _Rule
) -> tuple[list[str], str] | None:
    """`new_lines` written in the file's conventions, and the precise rule name; None if unproven.

    Raises:
        _CannotRender: the window matches but the replacement cannot be
            written in the file's conventions (the reason is the message).
    """
    count = len(old_lines)
    file_bodies = lines.bodies[first : first + count]
    pairs = list(zip(file_bodies, old_lines, strict=True))
    if rule.lookalikes:
        norm_pairs = [(normalise_lookalikes(f), normalise_lookalikes(o)) for f, o in pairs]
    else:
        norm_pairs = pairs
    shift: _Shift | None = None
    if rule.indentation:
        shifts = _shifts(norm_pairs, new_lines)
        if not shifts:
            return None  # the indentation differs unevenly: not a shift
        rendered = {tuple(s.render(b) for b in new_lines) for s in shifts}
        if len(rendered) > 1:
            raise _CannotRender(
                "the indentation of old_string maps to the file's in more than one way"
            )
        shift = shifts[0]
    chars = _char_map(pairs) if rule.lookalikes else {}
    # Context lines (those new_string keeps from old_string) are written as
    # the file has them, invisible characters included. They are aligned by
    # position (a line-level diff of old and new), so two equal context
    # lines that differ in the file each keep their own text.
    kept: dict[int, str] = {}
    aligner = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, _i2, j1, j2 in aligner.get_opcodes():
        if tag == "equal":
            for offset in range(j2 - j1):
                kept[j1 + offset] = file_bodies[i1 + offset]
    out: list[str] = []
    for index, body in enumerate(new_lines):
        if index in kept:
            out.append(kept[index])
            continue
        line = body
        if shift is not None:
            moved = shift.render(line)
            if moved is None:
                raise _CannotRender(
                    f"line {index + 1} of new_string is indented less than the shift between "
                    f"old_string and the file"
                )
            line = moved
        if chars:
            line = "".join(chars.get(c, c) for c in line)
        out.append(line)
    return out, _rule_name(rule, pairs, shift)


def _rule_name(rule: _Rule, pairs: list[tuple[str, str]], shift: _Shift | None) -> str:
    # Rules are tried in order, so the one that matched was needed: name it
    # precisely (tabs or a shift; trailing spaces or only the line endings).
    if rule.lookalikes:
        return "unicode"
    if rule.indentation and shift is not None:
        differ = [(f, o) for f, o in pairs if f.strip() and _indent(f) != _indent(o)]
        if any(("\t" in _indent(f)) != ("\t" in _indent(o)) for f, o in differ):
            return "tabs"
        return "indent"
    if any(f != o for f, o in pairs):
        return "trailing_whitespace"
    return "line_endings"


def _tolerant(
    text: str, old: str, new: str, *, replace_all: bool, shown: str
) -> Applied | Refused | None:
    """A tolerant match of `old` in `text`, a refusal with reasons, or None (nothing matched)."""
    lines = _Lines.of(text)
    old_l, new_l = _Old.of(old), _Old.of(new)
    if not any(line.strip() for line in old_l.lines) or not lines.bodies:
        return None
    plain = text.isascii() and old.isascii()
    for rule in _RULES:
        if rule.lookalikes and plain:
            continue  # nothing to read as ASCII: the same windows as the rule before
        file_keys = [rule.key_file(b) for b in lines.bodies]
        old_keys = [rule.key_old(b) for b in old_l.lines]
        firsts = [
            f for f in _windows(file_keys, old_keys) if _edges_fit(lines, f, len(old_keys), old_l)
        ]
        if not firsts:
            continue
        line_numbers = [f + 1 for f in firsts]
        if len(firsts) > 1 and not replace_all:
            return _several(
                len(firsts), line_numbers, shown, f" when {_RULE_WORDS[rule.name]} is ignored"
            )
        if _overlap(firsts, len(old_keys)):
            return Refused(
                f"old_string matches overlapping places in {shown!r} when {_RULE_WORDS[rule.name]} "
                f"is ignored (lines {_listed(line_numbers)}); replace_all cannot apply it "
                f"unambiguously. Edit each place with enough context to be unique."
            )
        sites: list[_Site] = []
        for first in firsts:
            try:
                built = _build(lines, first, old_l, new_l, rule)
            except _CannotRender as exc:
                return Refused(
                    f"old_string matches line {first + 1} of {shown!r} when "
                    f"{_RULE_WORDS[rule.name]} is ignored, but the edit was not applied: "
                    f"{exc}. Copy old_string and new_string with the file's exact indentation."
                )
            if built is None:
                continue
            replacement, name = built
            start = lines.starts[first]
            if old_l.lead:
                start -= len(lines.endings[first - 1])
            last = first + len(old_keys) - 1
            end = lines.body_end(last) + (len(lines.endings[last]) if old_l.trail else 0)
            sites.append(_Site(first, start, end, replacement, name))
        if not sites:
            continue
        if replace_all and len(sites) != len(firsts):
            return Refused(
                f"old_string matches lines {_listed(line_numbers)} of {shown!r} when "
                f"{_RULE_WORDS[rule.name]} is ignored, but not every occurrence maps "
                f"unambiguously; replace_all was not applied. Edit each place on its own."
            )
        return _finish(text, sites, shown, old)
    return _substring_lookalikes(text, old, new, replace_all=replace_all, shown=shown)


_RULE_WORDS = {
    "trailing_whitespace": "trailing whitespace (and line endings)",
    "indent": "indentation (and trailing whitespace)",
    "tabs": "tabs against spaces in the indentation",
    "unicode": "look-alike quotes, dashes and spaces (and indentation)",
}


def _edges_fit(lines: _Lines, first: int, count: int, old: _Old) -> bool:
    """Whether a line break at old_string's start/end exists in the file there."""
    if old.lead and (first == 0 or not lines.endings[first - 1]):
        return False
    return not (old.trail and not lines.endings[first + count - 1])


def _overlap(firsts: list[int], count: int) -> bool:
    return any(b < a + count for a, b in itertools.pairwise(firsts))


def _first_difference(text: str, site: _Site, old: str) -> str:
    """The first line where the file's matched text and old_string differ, drawn visibly."""
    found = text[site.start : site.end].strip("\r\n").splitlines()
    wanted = old.strip("\r\n").splitlines()
    for offset, (file_line, old_line) in enumerate(zip(found, wanted, strict=False)):
        if file_line != old_line:
            return (
                f" Line {site.first + 1 + offset} of the file is {visible(file_line)}, "
                f"old_string has {visible(old_line)} (→ is a tab, · a trailing space): "
                f"{_difference(file_line, old_line)}."
            )
    return ""


def _finish(text: str, sites: list[_Site], shown: str, old: str | None = None) -> Applied | Refused:
    parts: list[str] = []
    last = 0
    for site in sites:
        parts.append(text[last : site.start])
        parts.append(site.replacement)
        last = site.end
    parts.append(text[last:])
    result = "".join(parts)
    if is_python(shown) and python_parses(text, shown) and not python_parses(result, shown):
        return Refused(
            f"old_string matches line {sites[0].first + 1} of {shown!r} only when "
            f"{_RULE_WORDS.get(sites[0].matched, 'small differences are')} ignored, and applying "
            f"it there would leave the Python file unparsable, so it was not applied."
            f"{'' if old is None else _first_difference(text, sites[0], old)} Read the "
            f"lines and copy old_string and new_string exactly."
        )
    first = sites[0]
    site_b = len(text[: first.start].encode("utf-8"))
    data = result.encode("utf-8")
    return Applied(
        data=data,
        site=site_b,
        length=len(first.replacement.encode("utf-8")),
        count=len(sites),
        matched=first.matched,
    )


def _substring_lookalikes(
    text: str, old: str, new: str, *, replace_all: bool, shown: str
) -> Applied | Refused | None:
    """Look-alikes inside a line (old_string not made of whole lines): a same-offset search."""
    norm_text = normalise_lookalikes(text)
    needle = normalise_lookalikes(old)
    if needle == old and norm_text == text:
        return None
    if "\r\n" in text and "\r" not in needle and text.count("\n") == text.count("\r\n"):
        needle, new, old = _to_crlf(needle), _to_crlf(new), _to_crlf(old)
    sites = []
    start = norm_text.find(needle)
    while start >= 0:
        end = start + len(needle)
        if (needle.startswith("\n") and start and norm_text[start - 1] == "\r") or (
            needle.endswith("\r") and norm_text[end : end + 1] == "\n"
        ):
            start = norm_text.find(needle, start + 1)  # it would split a CRLF
            continue
        sites.append(start)
        start = norm_text.find(needle, end)
    if not sites:
        return None
    if len(sites) > 1 and not replace_all:
        numbers = [text.count("\n", 0, s) + 1 for s in sites]
        return _several(len(sites), numbers, shown, f" when {_RULE_WORDS['unicode']} is ignored")
    chars: dict[str, str] = {}
    for site in sites:
        for fc, oc in zip(text[site : site + len(old)], old, strict=True):
            if fc != oc:
                chars.setdefault(oc, fc)
    replacement = "".join(chars.get(c, c) for c in new)
    built = [_Site(text.count("\n", 0, s), s, s + len(old), replacement, "unicode") for s in sites]
    return _finish(text, built, shown, old)


# --- refusals -------------------------------------------------------------------


def _cheap_not_found(text: str, old: str, shown: str) -> str:
    """The not-found message for a file too big for the near-miss window."""
    hint = ""
    if old.split() and re.search(r"\s+".join(map(re.escape, old.split())), text):
        hint = (
            " A match exists if whitespace is ignored; copy the exact spacing and line breaks "
            "from the file."
        )
    return (
        f"old_string was not found in {shown!r}.{hint} Read the file again (it may have "
        f"changed) and copy old_string exactly."
    )


_MARKS = {"\t": "→", "\r": "␍", "\u00a0": "⍽"}


def visible(line: str) -> str:
    """`line` with tabs, CRs, no-break and trailing spaces drawn as visible marks."""
    body = line.rstrip(" ")
    trailing = "·" * (len(line) - len(body))
    out = "".join(_MARKS.get(c, c) for c in body)
    return f"'{out}{trailing}'"


def _difference(file_body: str, old_body: str) -> str:
    """What differs between one file line and the model's line, in words."""
    fi, oi = _indent(file_body), _indent(old_body)
    if _strip(file_body) == _strip(old_body):
        if fi != oi:
            return (
                f"the file indents it with {_describe_ws(fi)}, old_string with {_describe_ws(oi)}"
            )
        return "only trailing whitespace differs"
    fn, on = normalise_lookalikes(file_body), normalise_lookalikes(old_body)
    if _strip(fn) == _strip(on):
        for fc, oc in zip(_strip(file_body), _strip(old_body), strict=False):
            if fc != oc:
                return (
                    f"the file has {fc!r} (U+{ord(fc):04X}) where old_string has {oc!r} "
                    f"(U+{ord(oc):04X})"
                )
    return "the text differs"


def _describe_ws(ws: str) -> str:
    if not ws:
        return "nothing"
    tabs, spaces = ws.count("\t"), ws.count(" ")
    parts = []
    if tabs:
        parts.append(f"{tabs} tab{'s' * (tabs > 1)}")
    if spaces:
        parts.append(f"{spaces} space{'s' * (spaces > 1)}")
    other = len(ws) - tabs - spaces
    if other:
        parts.append(f"{other} other space character{'s' * (other > 1)}")
    return " and ".join(parts)


def _best_window(lines: _Lines, old_lines: list[str]) -> int | None:
    """The file line (index) where a window most like `old_lines` starts, or None."""
    keys = [_lookalike_strip(b) for b in old_lines]
    wanted: dict[str, list[int]] = {}
    for k, key in enumerate(keys):
        if key:
            wanted.setdefault(key, []).append(k)
    votes: dict[int, int] = {}
    for index, body in enumerate(lines.bodies):
        at = wanted.get(_lookalike_strip(body))
        if at:
            for k in at:
                votes[index - k] = votes.get(index - k, 0) + 1
    if votes:
        best = max(votes.values())
        return min(start for start, v in votes.items() if v == best)
    # Nothing equal even loosely: the line most like old_string's first filled
    # line, among the lines that share a word with it (difflib on every line
    # of a big file would cost a failed edit far more than the edit).
    k, key = next((k, key) for k, key in enumerate(keys) if key)
    words = set(re.findall(r"\w{3,}", key))
    candidates = [
        (index, body)
        for index, body in enumerate(lines.bodies)
        if words and any(word in body for word in words)
    ][:_DIFFLIB_MAX_LINES]
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(key)
    best_ratio, best_index = 0.6, None
    for index, body in candidates:
        matcher.set_seq1(_lookalike_strip(body))
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best_ratio, best_index = ratio, index
    return None if best_index is None else best_index - k


def near_miss(text: str, old: str, shown: str) -> str:
    """The refusal for an `old` found nowhere: the nearest window of the file, differences shown."""
    old_lines = [line.removesuffix("\r") for line in old.strip("\r\n").split("\n")]
    filled = [line for line in old_lines if line.strip()]
    if filled and all(_NUMBERED.match(line) for line in filled):
        stripped = "\n".join(_NUMBERED.sub("", line, count=1) for line in old_lines)
        found = " (without them it matches)" if stripped and stripped in text else ""
        return (
            f"old_string was not found in {shown!r}. It seems to include the reader's line-number "
            f"prefixes ('12<TAB>'); remove them{found}."
        )
    head = f"old_string was not found in {shown!r}."
    advice = "Copy old_string from these lines exactly (the reader shows them the same way)."
    lines = _Lines.of(text)
    if not filled or not lines.bodies:
        return f"{head} Read the file again (it may have changed) and copy old_string exactly."
    start = _best_window(lines, old_lines)
    if start is None:
        return (
            f"{head} No line of the file resembles it. Read the file again (it may have changed) "
            f"and copy old_string exactly."
        )
    differ: tuple[int, str] | None = None
    for k, old_body in enumerate(old_lines):
        index = start + k
        if index < 0 or index >= len(lines.bodies):
            continue
        if lines.bodies[index] != old_body:
            differ = (index, _difference(lines.bodies[index], old_body))
            detail = (
                f"First difference at line {index + 1}: the file has "
                f"{visible(lines.bodies[index])}, old_string line {k + 1} has "
                f"{visible(old_body)} ({differ[1]})."
            )
            break
    else:
        detail = (
            "Each line matches, but the line breaks around them differ (old_string starts or "
            "ends with a line break the file does not have there)."
        )
    focus = differ[0] if differ else max(start, 0)
    low = max(0, min(max(start, 0) - 1, focus - _WINDOW_LINES // 2))
    high = min(len(lines.bodies), low + _WINDOW_LINES, max(start, 0) + len(old_lines) + 1)
    if high - low < min(_WINDOW_LINES, len(lines.bodies)) and high == len(lines.bodies):
        low = max(0, high - _WINDOW_LINES)
    rows = []
    for index in range(low, max(high, focus + 1)):
        mark = ">" if differ and index == differ[0] else " "
        rows.append(f"{mark}{index + 1}\t{lines.bodies[index]}")
    crlf = " The file's lines end with CRLF." if "\r\n" in lines.endings[low:high] else ""
    return (
        f"{head} The nearest lines of the file ('>' marks the first line that differs):\n"
        + "\n".join(rows)
        + f"\n{detail}{crlf} {advice}"
    )


# --- hunks (patches) ------------------------------------------------------------

_EXACT = _Rule("exact", str, str, indentation=False, lookalikes=False)
_LINE_RULES = (_EXACT, *_RULES)


@attrs.frozen
class Hunk:
    r"""One located hunk's input: the lines it expects and the lines it leaves.

    Attributes:
        old: the lines the file must hold (context and removed lines).
        new: the lines that replace them (context and added lines).
        after: the first line index the hunk may start at (past the
            previous hunk, or past its ``@@`` anchor line).
        expected: the line index a unified diff names (a tie-breaker), or None.
        at_end: the hunk must end at the end of the file (``*** End of File``).
        no_final_newline: the new text ends without a line break
            (``\\ No newline at end of file`` after the new side).
    """

    old: list[str]
    new: list[str]
    after: int = 0
    expected: int | None = None
    at_end: bool = False
    no_final_newline: bool = False


@attrs.frozen
class Placed:
    """A hunk located in the file: where, what replaces it, and the rule that found it."""

    first: int
    count: int
    new: list[str]
    matched: str
    no_final_newline: bool = False


def find_line(lines: _Lines, wanted: str, after: int) -> int | None:
    """The first line at or after `after` equal to `wanted` (an ``@@`` anchor), loosely."""
    for rule in _LINE_RULES:
        key = rule.key_old(wanted)
        for index in range(after, len(lines.bodies)):
            if rule.key_file(lines.bodies[index]) == key:
                return index
    return None


def place_hunk(lines: _Lines, hunk: Hunk) -> Placed | str:
    """Where `hunk` applies in `lines`, or why it cannot be placed (text for the model).

    Exact lines first, then each tolerant rule; a rule's match counts only if
    it is the one place at or after `hunk.after` (at the end with `at_end`),
    or, among several, the one at the line a unified diff names.
    """
    count = len(hunk.old)
    total = len(lines.bodies)
    if not count:
        # Only added lines: they go where the diff says, or at the end.
        at = total if hunk.expected is None or hunk.at_end else min(hunk.expected, total)
        return Placed(at, 0, list(hunk.new), "exact", hunk.no_final_newline)
    for rule in _LINE_RULES:
        file_keys = [rule.key_file(b) for b in lines.bodies]
        old_keys = [rule.key_old(b) for b in hunk.old]
        firsts = [f for f in _windows(file_keys, old_keys) if f >= hunk.after]
        if hunk.at_end:
            firsts = [f for f in firsts if f + count == total]
        if not firsts:
            continue
        if len(firsts) > 1:
            if hunk.expected is not None and hunk.expected in firsts:
                firsts = [hunk.expected]
            else:
                return (
                    f"its lines occur {len(firsts)} times (lines "
                    f"{_listed([f + 1 for f in firsts])}); add context lines or an '@@' line "
                    f"naming the enclosing function or class"
                )
        first = firsts[0]
        if rule is _EXACT:
            return Placed(first, count, list(hunk.new), "exact", hunk.no_final_newline)
        try:
            rendered = _render(lines, first, list(hunk.old), list(hunk.new), rule)
        except _CannotRender as exc:
            return f"its lines match at line {first + 1} only loosely, and {exc}"
        if rendered is None:
            continue
        out, name = rendered
        return Placed(first, count, out, name, hunk.no_final_newline)
    return "its lines were not found" + _hunk_hint(lines, hunk)


def _hunk_hint(lines: _Lines, hunk: Hunk) -> str:
    old = "\n".join(hunk.old)
    text = near_miss(lines.text, old, "the file")
    _, _, rest = text.partition(". ")
    return f" ({rest})" if rest else ""


def apply_placed(lines: _Lines, placed: list[Placed]) -> str:
    """The text with every placed hunk applied (they are in order and do not overlap)."""
    ending = lines.ending()
    total = len(lines.bodies)
    out: list[str] = ["\ufeff"] if lines.text.startswith("\ufeff") else []
    index = 0
    for hunk in placed:
        for i in range(index, hunk.first):
            out.append(lines.bodies[i] + lines.endings[i])
        end = hunk.first + hunk.count
        if hunk.new:
            use = lines.endings[hunk.first] if hunk.first < total else ending
            use = use or ending
            last_ending = use
            if end >= total and total:
                # The hunk reaches the end: the file's last line keeps its
                # (missing) final newline unless the diff says otherwise.
                had = lines.endings[total - 1]
                last_ending = "" if hunk.no_final_newline else (had or use)
                if hunk.count == 0 and not lines.endings[total - 1]:
                    # Appending to a file without a final newline: end its line first.
                    out.append(use)
                    last_ending = "" if hunk.no_final_newline else use
            elif not total:
                last_ending = "" if hunk.no_final_newline else use
            for i, body in enumerate(hunk.new):
                out.append(body + (last_ending if i == len(hunk.new) - 1 else use))
        index = end
    for i in range(index, total):
        out.append(lines.bodies[i] + lines.endings[i])
    return "".join(out)


def lines_of(text: str) -> _Lines:
    """`text` split into lines (the type `place_hunk` and `apply_placed` take)."""
    return _Lines.of(text)
