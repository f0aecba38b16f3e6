r"""An edit-robustness corpus built from real source files, for the editor's tests and benchmark.

Real Python files of well-known projects installed next to lionfactory
(attrs, trio, anyio, pydantic, ...) are cut into hunks: a window of a few
lines with one line changed, as a model sends it to ``edit``. Each hunk is
then perturbed the way models perturb edits, and every case carries the
file it runs on and the exact bytes a correct application leaves, so a
result is one of: applied (right bytes), refused (file untouched), or
misapplied (anything else, including a changed file on a must-refuse case).

Classes (``RECOVERABLE`` must apply, ``MUST_REFUSE`` must be refused):

* exact: the hunk as the file has it;
* indent: old and new shifted by the same 4 spaces (in or out);
* tabs: 4-space indentation written as tabs in old and new;
* trailing_whitespace: the file's window lines carry trailing spaces the
  model's old_string lacks;
* crlf: the file uses CRLF, the model writes LF (most hunks are one line
  with the blank line before it as context, ``"\n<line>"``, the case that
  used to leave ``\r\r\n``);
* unicode: curly quotes, en dashes and a no-break space in old and new;
* not_unique: a line that occurs several times in the file;
* nowhere: one line of old_string does not exist in the file;
* stale_context: one context line is stale in both old and new.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path

import attrs

RECOVERABLE = ("exact", "indent", "tabs", "trailing_whitespace", "crlf", "unicode")
MUST_REFUSE = ("not_unique", "nowhere", "stale_context")
CLASSES = RECOVERABLE + MUST_REFUSE
SUFFIX = "  # edited"
PACKAGES = ("attrs", "trio", "anyio", "pydantic", "httpx", "click", "pluggy", "hypothesis")


@attrs.frozen
class Case:
    """One edit: the file's bytes before, the call's strings, the bytes a correct edit leaves."""

    kind: str
    source: str  # where the file came from (for failure messages)
    before: bytes
    old: str
    new: str
    expected: bytes | None  # None: must be refused


def source_files(limit: int) -> list[Path]:
    """Up to `limit` real .py files (2-60 KB, UTF-8, sorted by path) from installed packages."""
    found: list[Path] = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            for path in sorted(Path(root).rglob("*.py")):
                try:
                    size = path.stat().st_size
                    if not 2_000 <= size <= 60_000:
                        continue
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if "\t" in text or "\r" in text or "\u00a0" in text:
                    continue  # the perturbations below need a plain spaces/LF file
                found.append(path)
    rng = random.Random(27)
    rng.shuffle(found)
    return sorted(found[:limit])


def _windows(lines: list[str], rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """(start, length, changed line) of hunks: unique text, an indented changed line."""
    count = len(lines)
    tries = 0
    while tries < 60:
        tries += 1
        length = rng.randint(3, 6)
        start = rng.randrange(0, max(1, count - length))
        window = lines[start : start + length]
        if len(window) < length or sum(bool(x.strip()) for x in window) < 2:
            continue
        changed = [
            k
            for k, x in enumerate(window)
            if x.strip() and x == x.rstrip() and x.startswith("    ")
        ]
        if not changed:
            continue
        yield start, length, rng.choice(changed)


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _shift(lines: list[str], by: int) -> list[str]:
    return [(" " * by + x if by > 0 else x[-by:]) if x.strip() else x for x in lines]


def _tabs(lines: list[str]) -> list[str]:
    out = []
    for x in lines:
        body = x.lstrip(" ")
        spaces = len(x) - len(body)
        out.append("\t" * (spaces // 4) + " " * (spaces % 4) + body if x.strip() else x)
    return out


_CURLY = str.maketrans({'"': "\u201c", "'": "\u2019", "-": "\u2013"})


def _curly(line: str) -> str:
    body = line.lstrip(" ")
    lead = line[: len(line) - len(body)]
    body = body.translate(_CURLY)
    # One inner space becomes a no-break space.
    return lead + body.replace(" ", "\u00a0", 1)


def _unique(text: str, old: str) -> bool:
    return text.count(old) == 1


def cases_for(path: Path, rng: random.Random) -> Iterator[Case]:
    """The cases of one file: one hunk per class where the file allows it."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    source = str(path)
    made: set[str] = set()
    for start, length, k in _windows(lines, rng):
        window = lines[start : start + length]
        new_window = list(window)
        new_window[k] = window[k] + SUFFIX
        old, new = "\n".join(window), "\n".join(new_window)
        if not _unique(text, old):
            continue
        after_lines = lines[:start] + new_window + lines[start + length :]
        expected = _join(after_lines).encode()
        before = text.encode()
        pending = [c for c in CLASSES if c not in made and c != "not_unique"]
        if not pending:
            break
        kind = pending[0]
        if kind == "exact":
            yield Case(kind, source, before, old, new, expected)
        elif kind == "indent":
            all_indented = all(x.startswith("    ") for x in window if x.strip())
            by = -4 if all_indented and rng.random() < 0.5 else 4
            yield Case(
                kind,
                source,
                before,
                "\n".join(_shift(window, by)),
                "\n".join(_shift(new_window, by)),
                expected,
            )
        elif kind == "tabs":
            yield Case(
                kind,
                source,
                before,
                "\n".join(_tabs(window)),
                "\n".join(_tabs(new_window)),
                expected,
            )
        elif kind == "trailing_whitespace":
            planted = [x + "  " if x.strip() and i != k else x for i, x in enumerate(window)]
            file_lines = lines[:start] + planted + lines[start + length :]
            kept = list(planted)
            kept[k] = window[k] + SUFFIX
            out = lines[:start] + kept + lines[start + length :]
            yield Case(kind, source, _join(file_lines).encode(), old, new, _join(out).encode())
        elif kind == "crlf":
            crlf_before = text.replace("\n", "\r\n").encode()
            crlf_expected = expected.replace(b"\n", b"\r\n")
            blank_before = start > 0 and not lines[start - 1].strip()
            if not blank_before and rng.random() < 0.7:
                continue  # prefer hunks that start with a blank context line
            if blank_before and lines[start].strip() and text.count("\n" + lines[start]) == 1:
                # A one-line hunk with the blank line before it as context,
                # old = "\n<line>": the case that used to match inside the
                # blank line's CRLF and leave "\r\r\n" behind.
                one = list(lines)
                one[start] = lines[start] + SUFFIX
                yield Case(
                    kind,
                    source,
                    crlf_before,
                    "\n" + lines[start],
                    "\n" + one[start],
                    _join(one).encode().replace(b"\n", b"\r\n"),
                )
            else:
                yield Case(kind, source, crlf_before, old, new, crlf_expected)
        elif kind == "unicode":
            if not any(c in old for c in "\"'-"):
                continue
            bent = [_curly(x) for x in window]
            bent_new = list(bent)
            bent_new[k] = bent[k] + SUFFIX
            bent_old = "\n".join(bent)
            if bent_old == old:
                continue
            yield Case(kind, source, before, bent_old, "\n".join(bent_new), expected)
        elif kind == "nowhere":
            wrong = list(window)
            wrong[k] = window[k] + " + zq_not_in_the_file"
            yield Case(kind, source, before, "\n".join(wrong), new, None)
        elif kind == "stale_context":
            others = [i for i, x in enumerate(window) if i != k and x.strip()]
            if not others:
                continue
            i = rng.choice(others)
            stale = list(window)
            body = stale[i].lstrip(" ")
            lead = stale[i][: len(stale[i]) - len(body)]
            stale[i] = (
                lead + (body[0].swapcase() if body[0].isalpha() else "x" + body[0]) + body[1:]
            )
            stale_new = list(stale)
            stale_new[k] = stale[k] + SUFFIX
            yield Case(kind, source, before, "\n".join(stale), "\n".join(stale_new), None)
        made.add(kind)
    # not_unique: a substantial line that occurs more than once.
    counts: dict[str, int] = {}
    for x in lines:
        if len(x.strip()) >= 8:
            counts[x] = counts.get(x, 0) + 1
    repeated = sorted(x for x, n in counts.items() if n > 1 and text.count(x) == n)
    if repeated:
        line = rng.choice(repeated)
        yield Case("not_unique", source, text.encode(), line, line + SUFFIX, None)


def build(limit: int = 80, seed: int = 27) -> list[Case]:
    """The corpus: cases from up to `limit` real files, deterministic for a seed."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for path in source_files(limit):
        cases.extend(cases_for(path, rng))
    return cases


def judge(case: Case, success: bool, after: bytes) -> str:
    """'applied', 'refused' or 'misapplied' for one case's outcome."""
    if not success:
        return "refused" if after == case.before else "misapplied"
    if case.expected is None:
        return "misapplied"
    return "applied" if after == case.expected else "misapplied"
