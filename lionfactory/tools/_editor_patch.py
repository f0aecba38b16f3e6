r"""Patches for the editor's ``apply_patch``: the two formats models write, parsed.

* The OpenAI/Codex format: ``*** Begin Patch`` / ``*** Add File: p`` (every
  line ``+``) / ``*** Delete File: p`` / ``*** Update File: p`` with an
  optional ``*** Move to: q`` and hunks introduced by ``@@`` (optionally
  ``@@ <a line of the file>``, an anchor the hunk comes after) holding
  `` ``/``-``/``+`` lines, optionally closed by ``*** End of File`` (the hunk
  ends at the end of the file) / ``*** End Patch``.
* Unified diffs as ``git diff`` prints them: ``diff --git`` headers,
  ``--- a/p`` / ``+++ b/p`` (``/dev/null`` for an added or deleted file),
  ``rename from``/``rename to``, ``@@ -l,s +l,s @@`` hunks whose line numbers
  break ties between equal candidates, and ``\\ No newline at end of file``.

The format is told from the text. Parsing is pure; the editor locates the
hunks (`lionfactory.tools._editor_match.place_hunk`) and writes the files.
"""

from __future__ import annotations

import re
from typing import Literal

import attrs

from lionfactory.tools._editor_match import Hunk

__all__ = ["FileOp", "PatchError", "parse_patch"]

MAX_PATCH_FILES = 200
"""More file operations than this in one patch are refused (split the patch)."""


class PatchError(ValueError):
    """The patch text cannot be parsed; the message says where and how to fix it."""


@attrs.frozen
class FileOp:
    """One file's change in a patch.

    Attributes:
        kind: "add", "delete" or "update".
        path: the file, relative to the workspace root.
        move_to: for an update, the new path (a rename), or None.
        content: for an add, the file's complete text.
        hunks: for an update, its hunks in order.
    """

    kind: Literal["add", "delete", "update"]
    path: str
    move_to: str | None = None
    content: str = ""
    hunks: tuple[Hunk, ...] = ()


def parse_patch(text: str) -> list[FileOp]:
    """The file operations of a Codex-format patch or a unified diff.

    Raises:
        PatchError: neither format, or malformed (the message names the line).
    """
    lines = text.replace("\r\n", "\n").split("\n")
    stripped = [line.strip() for line in lines]
    if "*** Begin Patch" in stripped:
        ops = _parse_codex(lines)
    elif (
        any(line.startswith(("--- ", "diff --git ")) for line in lines)
        and any(line.startswith("@@ ") or line.startswith("rename ") for line in lines)
    ) or any(line.startswith(("--- ", "diff --git ")) for line in lines):
        ops = _parse_unified(lines)
    else:
        raise PatchError(
            "the patch is in neither accepted format: start it with '*** Begin Patch' (the "
            "Codex format) or give a unified diff with '--- a/<path>' / '+++ b/<path>' "
            "headers and '@@ -l,s +l,s @@' hunks, as `git diff` prints it."
        )
    if not ops:
        raise PatchError("the patch changes no file; add at least one file operation.")
    if len(ops) > MAX_PATCH_FILES:
        raise PatchError(
            f"the patch changes {len(ops)} files; at most {MAX_PATCH_FILES} in one call. Split it."
        )
    seen: set[str] = set()
    for op in ops:
        for path in (op.path, op.move_to):
            if path is None:
                continue
            if path in seen:
                raise PatchError(
                    f"{path!r} appears in more than one file operation of the patch; give each "
                    f"file one operation (put all its hunks under one header)."
                )
            seen.add(path)
    return ops


# --- Codex ----------------------------------------------------------------------

_ADD, _DELETE, _UPDATE, _MOVE = (
    "*** Add File: ",
    "*** Delete File: ",
    "*** Update File: ",
    "*** Move to: ",
)


def _path(raw: str, number: int) -> str:
    path = raw.strip()
    if not path:
        raise PatchError(f"line {number}: the file path is empty.")
    return path


def _parse_codex(lines: list[str]) -> list[FileOp]:
    begin = next(i for i, line in enumerate(lines) if line.strip() == "*** Begin Patch")
    ops: list[FileOp] = []
    i = begin + 1
    ended = False
    while i < len(lines):
        line = lines[i]
        number = i + 1
        if line.strip() == "*** End Patch":
            ended = True
            break
        if line.startswith(_ADD):
            path = _path(line[len(_ADD) :], number)
            body: list[str] = []
            i += 1
            while i < len(lines) and lines[i].startswith("+"):
                body.append(lines[i][1:])
                i += 1
            ops.append(FileOp("add", path, content="".join(b + "\n" for b in body)))
            continue
        if line.startswith(_DELETE):
            ops.append(FileOp("delete", _path(line[len(_DELETE) :], number)))
            i += 1
            continue
        if line.startswith(_UPDATE):
            path = _path(line[len(_UPDATE) :], number)
            i += 1
            move_to = None
            if i < len(lines) and lines[i].startswith(_MOVE):
                move_to = _path(lines[i][len(_MOVE) :], i + 1)
                i += 1
            hunks, i = _codex_hunks(lines, i, path)
            if not hunks and move_to is None:
                raise PatchError(f"line {number}: 'Update File: {path}' has no hunk.")
            ops.append(FileOp("update", path, move_to=move_to, hunks=tuple(hunks)))
            continue
        if not line.strip():
            i += 1
            continue
        raise PatchError(
            f"line {number}: expected '*** Add File:', '*** Delete File:', '*** Update File:' "
            f"or '*** End Patch', got {line[:80]!r}."
        )
    if not ended:
        raise PatchError("the patch has no '*** End Patch' line; end it with one.")
    return ops


def _codex_hunks(lines: list[str], i: int, path: str) -> tuple[list[Hunk], int]:
    hunks: list[Hunk] = []
    # Anchors are kept as (text, hunk index); placement resolves them.
    while i < len(lines):
        line = lines[i]
        if line.startswith("*** ") and line.strip() != "*** End of File":
            break
        # "@@ class A" then "@@ def f": each anchor is searched after the one before.
        anchors: list[str] = []
        opened = False
        while i < len(lines) and lines[i].startswith("@@"):
            opened = True
            text = lines[i][2:].strip()
            if text:
                anchors.append(text)
            i += 1
        if not opened and hunks:
            raise PatchError(
                f"line {i + 1}: in 'Update File: {path}', expected '@@' or a hunk line, got "
                f"{line[:80]!r}."
            )
        old: list[str] = []
        new: list[str] = []
        at_end = False
        while i < len(lines):
            line = lines[i]
            if line.strip() == "*** End of File":
                at_end = True
                i += 1
                break
            if line.startswith(("@@", "*** ")):
                break
            if line.startswith("+"):
                new.append(line[1:])
            elif line.startswith("-"):
                old.append(line[1:])
            elif line.startswith(" "):
                old.append(line[1:])
                new.append(line[1:])
            elif line == "":
                if i == len(lines) - 1:
                    i += 1
                    break
                old.append("")
                new.append("")  # an empty context line the model left unprefixed
            else:
                raise PatchError(
                    f"line {i + 1}: a hunk line must start with ' ', '-' or '+', got {line[:80]!r}."
                )
            i += 1
        if not old and not new:
            if not anchors:
                continue
            raise PatchError(f"line {i}: the hunk after '@@ {anchors[-1]}' has no lines.")
        hunks.append(_AnchoredHunk(old=old, new=new, at_end=at_end, anchors=tuple(anchors)))
    return hunks, i


@attrs.frozen
class _AnchoredHunk(Hunk):
    """A Codex hunk with its ``@@`` anchor lines (each found after the previous one)."""

    anchors: tuple[str, ...] = ()


# --- unified --------------------------------------------------------------------

_HUNK_HEAD = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(raw: str, prefix: str) -> str | None:
    """The path of a ``---``/``+++`` line without git's ``a/`` (or ``b/``) prefix."""
    path = raw.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith('"') and path.endswith('"'):
        raise PatchError(f"quoted path {path} (unusual characters) is not supported; rename.")
    return path.removeprefix(prefix)


def _parse_unified(lines: list[str]) -> list[FileOp]:
    ops: list[FileOp] = []
    i = 0
    rename_from = rename_to = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            rename_from = rename_to = None
            i += 1
            continue
        if line.startswith("rename from "):
            rename_from = line[len("rename from ") :].strip()
        elif line.startswith("rename to "):
            rename_to = line[len("rename to ") :].strip()
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not nxt.startswith("--- ") and rename_from:
                ops.append(FileOp("update", rename_from, move_to=rename_to))
        elif line.startswith("Binary files ") or line.startswith("GIT binary patch"):
            raise PatchError(f"line {i + 1}: binary patches are not supported.")
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            source_raw, target_raw = line[4:].strip(), lines[i + 1][4:].strip()
            # git prefixes both sides (a/, b/); `git diff --no-prefix` neither.
            prefixed = all(
                side == "/dev/null" or side.startswith(mark)
                for side, mark in ((source_raw, "a/"), (target_raw, "b/"))
            )
            source = _strip_prefix(source_raw, "a/" if prefixed else "")
            target = _strip_prefix(target_raw, "b/" if prefixed else "")
            i += 2
            hunks, i = _unified_hunks(lines, i)
            if source is None and target is None:
                raise PatchError(f"line {i}: both sides are /dev/null.")
            if source is None:
                assert target is not None
                if any(h.old for h in hunks):
                    raise PatchError(f"{target!r} is added but its hunk removes lines.")
                content = "".join(b + "\n" for h in hunks for b in h.new)
                if hunks and hunks[-1].no_final_newline:
                    content = content[:-1]
                ops.append(FileOp("add", target, content=content))
            elif target is None:
                ops.append(FileOp("delete", source))
            else:
                move = target if target != source else None
                if rename_from and rename_to:
                    source, move = rename_from, rename_to
                ops.append(FileOp("update", source, move_to=move, hunks=tuple(hunks)))
            rename_from = rename_to = None
            continue
        i += 1
    return ops


def _unified_hunks(lines: list[str], i: int) -> tuple[list[Hunk], int]:
    hunks: list[Hunk] = []
    while i < len(lines):
        head = _HUNK_HEAD.match(lines[i])
        if head is None:
            break
        old_start = int(head.group(1))
        old_len = 1 if head.group(2) is None else int(head.group(2))
        new_len = 1 if head.group(4) is None else int(head.group(4))
        i += 1
        old: list[str] = []
        new: list[str] = []
        no_eol = False
        seen_old = seen_new = 0
        while i < len(lines) and (
            seen_old < old_len
            or seen_new < new_len
            or (i < len(lines) and lines[i].startswith("\\"))
        ):
            line = lines[i]
            if line.startswith("\\"):
                # "\ No newline at end of file" after the new (or context) side.
                previous = lines[i - 1][:1]
                if previous in ("+", " "):
                    no_eol = True
                i += 1
                continue
            tag, body = line[:1], line[1:]
            if tag == " " or line == "":
                old.append(body)
                new.append(body)
                seen_old += 1
                seen_new += 1
            elif tag == "-":
                old.append(body)
                seen_old += 1
            elif tag == "+":
                new.append(body)
                seen_new += 1
            else:
                raise PatchError(
                    f"line {i + 1}: the hunk '@@ -{old_start},{old_len} ...' ends early: "
                    f"{line[:80]!r} is not a ' ', '-' or '+' line. Check the hunk's line counts."
                )
            i += 1
        if seen_old != old_len or seen_new != new_len:
            raise PatchError(
                f"the hunk '@@ -{old_start},{old_len} +...,{new_len} @@' holds {seen_old} old and "
                f"{seen_new} new lines; fix its counts."
            )
        # A zero-length old side names the line after which to insert.
        expected = old_start if old_len == 0 else old_start - 1
        hunks.append(Hunk(old=old, new=new, expected=max(expected, 0), no_final_newline=no_eol))
    return hunks, i
