"""A numbered-line window over a byte stream, in bounded memory.

The reader shows files (and converted documents) as ``<line>TAB<text>`` rows.
Instead of loading the file (a 500 MB log would cost 500 MB) it streams: lines
before the window are skipped by counting newlines in 1 MiB chunks, only the
window's rows are kept, each row keeps at most `MAX_LINE_CHARS` characters of
its line, and the rows stop at `MAX_OUTPUT_BYTES`. After the window the rest
of the stream is counted (with ``bytes.count``) so the model learns the total
number of lines. For a file larger than `FULL_COUNT_BYTES` the reader stops
counting `COUNT_BUDGET` bytes after the window: counting the lines of a 500 MB
file costs ~0.1 s, a hundred times the window itself, and paging through it
would pay that on every call; when the file's size shows that more than the
budget is left, the count is not even started. Past the budget `total_lines`
is unknown (None) and `next_offset` still says where to continue. When a hasher
is given (file evidence for the coding toolkit) the whole stream is read
anyway, so the count is complete.

Windows of short lines take a bulk path: complete lines are decoded from the
buffer and split in pieces of at most 64 KiB, and the lines of all pieces
are numbered in one join, which keeps a 2,000-line window within a small
factor of a plain Python loop; any line that needs care (too long, invalid
UTF-8, over the output cap) falls back to the line-by-line path.
"""

from __future__ import annotations

import codecs
import functools
from typing import BinaryIO, Protocol

import attrs

__all__ = [
    "COUNT_BUDGET",
    "DEFAULT_LIMIT",
    "FULL_COUNT_BYTES",
    "MAX_LINE_CHARS",
    "MAX_OUTPUT_BYTES",
    "Window",
    "read_window",
]

DEFAULT_LIMIT = 2000
"""Rows returned when the model gives no positive limit: enough for most source files in one
read, small enough (with the line and byte caps) to leave room in the model's context."""

MAX_LINE_CHARS = 2000
"""Characters kept of one line; the rest is replaced by a marker."""

MAX_OUTPUT_BYTES = 256 * 1024
"""UTF-8 bytes of rows returned by one call; `next_offset` says where to go on."""

COUNT_BUDGET = 256 * 1024
"""Bytes after a window the reader scans to count the rest of a big file."""

FULL_COUNT_BYTES = 8 * 1024 * 1024
"""Files up to this size are always counted to the end (a few milliseconds at most)."""

_CHUNK = 1 << 20
# Reads start small and double up to _CHUNK: a window at the top of a file
# needs a few hundred KiB at most, and reading a whole MiB for it would cost
# more than building the rows.
_FIRST_CHUNK = 1 << 16
# The bulk path decodes and splits at most this many bytes at a time: one
# block of a whole window (256 KiB) was decoded into fresh pages of memory,
# whose faults cost more than the decoding; pieces this size are reused by
# the allocator from one to the next.
_BULK_BYTES = 1 << 16
# ... and at most this many bytes for each line still wanted: the last few
# lines of a window need not decode (and copy past them) a whole piece.
_LOOK_PER_LINE = 256
# Enough bytes for MAX_LINE_CHARS characters of up to 4 bytes each, plus one
# character to tell "exactly at the limit" from "over it".
_KEEP_BYTES = (MAX_LINE_CHARS + 1) * 4
# Deleting UTF-8 continuation bytes leaves one byte per character, which
# counts the characters of a long line without decoding it.
_CONTINUATION = bytes(range(0x80, 0xC0))

# Rows up to this number take a head made once ("\n1\t" .. "\n4096\t"),
# and a block of rows is one join of heads and lines taken in turn: that
# takes a quarter of the time of formatting the number per row, and half of
# adding each head to its line before joining. Most reads start near the
# top of a file. Further rows format their own.
_PREFIXED_ROWS = 4096


@functools.cache
def _row_heads() -> tuple[str, ...]:
    # Made on the first read, not at import: 0.8 ms a process start would pay.
    return tuple(f"\n{n}\t" for n in range(_PREFIXED_ROWS + 1))


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


@attrs.frozen
class Window:
    """The rows of one window and what was left out.

    Attributes:
        content: the rows, ``<one-based line number>TAB<text>``, joined by newlines.
        total_lines: the number of lines in the whole stream, or None when
            the stream goes on past `COUNT_BUDGET` bytes after the window.
        next_offset: the offset to continue from, or None when the window
            reached the end.
        cut_lines: how many rows had their line cut to `MAX_LINE_CHARS`.
        output_capped: whether the rows stopped at `MAX_OUTPUT_BYTES`.
        replaced: whether invalid UTF-8 in the window was replaced by U+FFFD.
        past_end: whether the offset lies beyond the last line.
    """

    content: str
    total_lines: int | None
    next_offset: int | None
    cut_lines: int = 0
    output_capped: bool = False
    replaced: bool = False
    past_end: bool = False

    @property
    def truncated(self) -> bool:
        """Whether anything of the requested text was left out."""
        return self.next_offset is not None or self.cut_lines > 0


class _Lines:
    """Line access to a binary stream with a bounded buffer.

    The buffer is consumed by moving `_pos` instead of slicing: slicing off
    each line copied the rest of the 1 MiB chunk once per line.
    """

    def __init__(self, raw: BinaryIO, hasher: _Hasher | None, first: int = _FIRST_CHUNK) -> None:
        self._raw = raw
        self._hasher = hasher
        self._buf = b""
        self._pos = 0
        self._chunk = first

    def _fill(self, most: int | None = None) -> bool:
        """Load the next chunk once the buffer is used up; False at end of stream.

        `most` caps the chunk (a budgeted count reads no further than it scans).
        """
        if self._pos < len(self._buf):
            return True
        chunk = self._raw.read(self._chunk if most is None else max(1, min(self._chunk, most)))
        self._chunk = min(self._chunk * 2, _CHUNK)
        if not chunk:
            return False
        if self._hasher is not None:
            self._hasher.update(chunk)
        self._buf, self._pos = chunk, 0
        return True

    def skip(self, count: int) -> int:
        """Skip up to `count` lines; return how many were skipped."""
        skipped = 0
        mid_line = False
        while skipped < count:
            if not self._fill():
                if mid_line:  # a last line without a final newline
                    skipped += 1
                break
            newlines = self._buf.count(b"\n", self._pos)
            if skipped + newlines < count:
                skipped += newlines
                mid_line = not self._buf.endswith(b"\n")
                self._pos = len(self._buf)
                continue
            index = self._pos - 1
            for _ in range(count - skipped):
                index = self._buf.index(b"\n", index + 1)
            self._pos = index + 1
            skipped = count
        return skipped

    def next_line(self) -> tuple[bytes, int, int] | None:
        """The next line without its newline: (head bytes, byte length, characters)."""
        head = bytearray()
        length = 0
        chars = 0
        while True:
            if not self._fill():
                return (bytes(head), length, chars) if length else None
            end = self._buf.find(b"\n", self._pos)
            stop = len(self._buf) if end < 0 else end
            part = self._buf[self._pos : stop]
            if len(head) < _KEEP_BYTES:
                head += part[: _KEEP_BYTES - len(head)]
            length += len(part)
            chars += len(part.translate(None, _CONTINUATION))
            self._pos = stop + 1 if end >= 0 else stop
            if end >= 0:
                return bytes(head), length, chars

    def count_rest(self, budget: int | None = None, size: int | None = None) -> int | None:
        """Count the lines left in the stream, or None past `budget` bytes.

        `size` is the stream's length when known (a regular file's fstat).
        Returns 0 exactly when nothing is left.
        """
        count = 0
        scanned = 0
        last = b"\n"
        if budget is not None and size is not None:
            # More than the budget left by the stream's known size: the count
            # would run out and say "unknown" anyway, after scanning the whole
            # budget (a third of a top window's time, and all of it wasted).
            left = size - self._raw.tell() + len(self._buf) - self._pos
            if left > budget:
                return None
        while True:
            if self._pos >= len(self._buf) and budget is not None and scanned >= budget:
                # The budget is spent: the total is unknown unless the stream
                # ends right here (one byte tells; no hasher runs on this path).
                if self._raw.read(1):
                    return None
                break
            # Reading a whole chunk past the budget would count up to a MiB
            # the budget does not ask for (a third of a window's time).
            if not self._fill(None if budget is None else budget - scanned):
                break
            if self._pos < len(self._buf):
                count += self._buf.count(b"\n", self._pos)
                scanned += len(self._buf) - self._pos
                last = self._buf[-1:]
            self._pos = len(self._buf)
        return count + (last != b"\n")

    def block(self, room: int, lines: int) -> tuple[bytes | bytearray, int, int] | None:
        """``(buffer, start, end)``: complete lines ahead in ``buffer[start:end]``, not consumed.

        Only the next `room` bytes, at most `_BULK_BYTES` and `_LOOK_PER_LINE`
        for each of the `lines` wanted, are looked at (rows never hold more;
        a bigger block is a bigger transient copy);
        the caller keeps as many of the lines as it wants (counting them
        here cost a third of a top window's time). The buffer is not
        copied: the caller decodes the lines from it.
        None when the first line does not end within them or is longer than
        `MAX_LINE_CHARS` bytes (it may need cutting): the line-by-line path
        takes it, instead of every later line paying for a look at it.
        """
        if not self._fill():
            return None
        buf, pos = self._buf, self._pos
        look = pos + min(room, _BULK_BYTES, lines * _LOOK_PER_LINE)
        first = buf.find(b"\n", pos, look)
        if first < 0 or first - pos > MAX_LINE_CHARS:
            return None
        return buf, pos, buf.rfind(b"\n", pos, look) + 1

    def consume(self, size: int) -> None:
        """Mark `size` bytes of the buffer as read (after `block`)."""
        self._pos += size


def _decode(head: bytes, length: int, chars: int) -> tuple[str, bool, bool]:
    """Decode one line's head: (text, cut, replaced)."""
    cut = length > len(head) or chars > MAX_LINE_CHARS
    if not cut:
        # The common case: a whole line, decoded in one call instead of
        # building an incremental decoder per row.
        try:
            text, replaced = head.decode("utf-8"), False
        except UnicodeDecodeError:
            text, replaced = head.decode("utf-8", "replace"), True
        return text.removesuffix("\r"), False, replaced
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        # final=False: a cut head may end inside a multi-byte character,
        # which is not an encoding error.
        text = decoder.decode(head, final=False)
        replaced = False
    except UnicodeDecodeError:
        text = head.decode("utf-8", "replace")
        replaced = True
    marker = f" … [line cut: {MAX_LINE_CHARS:,} of {chars:,} characters shown]"
    return text[:MAX_LINE_CHARS] + marker, True, replaced


def read_window(
    stream: BinaryIO,
    *,
    offset: int,
    limit: int,
    hasher: _Hasher | None = None,
    count_budget: int | None = None,
    size: int | None = None,
    first_read: int | None = None,
) -> Window:
    """Return the rows for lines ``offset + 1 .. offset + limit`` of `stream`.

    Args:
        stream: a binary stream positioned at its start; read to its end.
        offset: lines to skip (already clamped to >= 0).
        limit: rows to return at most (already > 0).
        hasher: fed every byte of the stream, for file evidence.
        count_budget: bytes after the window scanned to count the remaining
            lines; None counts to the end. Ignored with a hasher, which reads
            every byte anyway.
        size: the stream's length in bytes when known (the fstat of a
            regular file): when more than `count_budget` bytes are left after
            the window, the count is not even started. A file that shrinks
            meanwhile is then reported as going on, as a file that grows is
            by any read.
        first_read: the size of the first read of `stream` (64 KiB when
            None; later ones double up to 1 MiB): a stream held in memory
            is read in one piece, which saves joining its rows once more.

    Returns:
        The window; its `total_lines` counts the whole stream, or is None
        when the count stopped at `count_budget`.
    """
    lines = _Lines(stream, hasher, first_read or _FIRST_CHUNK)
    skipped = lines.skip(offset)
    if skipped < offset:
        return Window(content="", total_lines=skipped, next_offset=None, past_end=True)
    rows: list[str] = []
    # Lines of the bulk path not yet made rows, the first numbered `run_from + 1`:
    # the pieces of a window are made rows in one join (a join per piece
    # and one of those cost a copy of the whole window more).
    run: list[str] = []
    run_from = offset
    out_bytes = 0
    cut_lines = 0
    replaced = False
    capped = False
    unshown = 0
    number = offset
    while number - offset < limit:
        bulk = _bulk_rows(lines, number, limit - (number - offset), MAX_OUTPUT_BYTES - out_bytes)
        if bulk is not None:
            body, row_bytes = bulk
            if not run:
                run_from = number
            run += body
            number += len(body)
            out_bytes += row_bytes
            continue
        if run:
            rows.append(_numbered(run_from, run))
            run = []
        line = lines.next_line()
        if line is None:
            break
        text, cut, bad = _decode(*line)
        row = f"{number + 1}\t{text}"
        row_bytes = len(row.encode("utf-8", "replace")) + 1
        if rows and out_bytes + row_bytes > MAX_OUTPUT_BYTES:
            capped = True
            unshown = 1  # this line was consumed but not shown
            break
        number += 1
        out_bytes += row_bytes
        rows.append(row)
        cut_lines += cut
        replaced = replaced or bad
    if run:
        rows.append(_numbered(run_from, run))
    counted = lines.count_rest(None if hasher is not None else count_budget, size)
    rest = None if counted is None else unshown + counted
    return Window(
        content="\n".join(rows),
        total_lines=None if rest is None else number + rest,
        next_offset=number if rest is None or rest else None,
        cut_lines=cut_lines,
        output_capped=capped,
        replaced=replaced,
    )


def _digits(first: int, last: int) -> int:
    """The total number of decimal digits of the integers ``first..last``."""
    total, width, low = 0, 1, 1
    while low <= last:
        high = low * 10 - 1
        a, b = max(first, low), min(last, high)
        if a <= b:
            total += (b - a + 1) * width
        width, low = width + 1, high + 1
    return total


def _end_of_lines(view: memoryview, start: int, count: int) -> int:
    """Where the first `count` lines from `start` end, newlines included (more follow)."""
    heads = view[start:].tobytes().split(b"\n", count)
    del heads[-1]
    return start + sum(map(len, heads)) + count


def _lines_within(buf: bytes | bytearray, start: int, end: int, most: int) -> bool:
    """Whether no line of ``buf[start:end]`` (which ends with a newline) has over `most` bytes.

    From each line's start the last newline within reach is found, so a
    window of short lines is crossed in steps of about `most` bytes.
    """
    rfind = buf.rfind
    while start < end:
        start = rfind(b"\n", start, start + most + 1) + 1
        if not start:
            return False
    return True


def _bulk_rows(lines: _Lines, number: int, most: int, room: int) -> tuple[list[str], int] | None:
    """The next complete lines in the buffer, decoded, when they need no care.

    Returns ``(lines, UTF-8 bytes of their rows incl. separators)`` for at
    most `most` lines, numbered from ``number + 1``, and consumes them; or
    None (nothing consumed) so that the line-by-line path handles the next
    line: one that may need cutting, holds invalid UTF-8, or would pass the
    output cap on its own. The block is decoded and split once; splitting
    the bytes into lines first cost as much again.
    """
    found = lines.block(room, most)
    if found is None:
        return None
    buf, start, end = found
    with memoryview(buf) as view:
        while end > start:
            try:
                text = str(view[start:end], "utf-8")
            except UnicodeDecodeError as exc:
                # Keep the lines before the bad one; the per-line path replaces it.
                end = buf.rfind(b"\n", start, start + exc.start) + 1
                continue
            crlf = buf.count(b"\r\n", start, end) if buf.find(b"\r", start, end) >= 0 else 0
            if crlf:
                text = text.replace("\r\n", "\n")
            # At most `most` lines: what follows them is left in one last piece,
            # which is empty when the block holds no more (it ends with a newline).
            body = text.split("\n", most)
            rest = body.pop()
            if rest:
                if not crlf and text.isascii():
                    # One byte a character: the lines end where the rest begins
                    # (splitting the bytes again cost as much as the rows).
                    end -= len(rest)
                else:
                    end = _end_of_lines(view[:end], start, most)
                    crlf = buf.count(b"\r\n", start, end) if crlf else 0
            # A line that may need cutting goes to the per-line path, which
            # counts a CR too: with CRs removed, one character less is the safe bound.
            longest = MAX_LINE_CHARS - 1 if crlf else MAX_LINE_CHARS
            # No line has more bytes than that (UTF-8 has at least one byte a
            # character) settles it at a third of the cost of measuring every line.
            if not _lines_within(buf, start, end, longest) and max(map(len, body)) > longest:
                first_long = next(i for i, line in enumerate(body) if len(line) > longest)
                end = _end_of_lines(view[:end], start, first_long)
                continue
            taken = len(body)
            # Each row: its number, a tab, the line (without CR), a newline between rows.
            size = (end - start - crlf - taken) + _digits(number + 1, number + taken) + 2 * taken
            if size > room:
                # Rows are a little longer than their lines: keep proportionally fewer.
                keep = max(0, min(taken - 1, taken * room // size))
                end = _end_of_lines(view[:end], start, keep)
                continue
            lines.consume(end - start)
            return body, size
    return None


def _numbered(number: int, body: list[str]) -> str:
    """The rows of `body`, its lines numbered from ``number + 1``, joined by newlines."""
    taken = len(body)
    if number + taken <= _PREFIXED_ROWS:
        pieces: list[str] = [""] * (2 * taken)
        pieces[0::2] = _row_heads()[number + 1 : number + taken + 1]
        pieces[0] = pieces[0][1:]  # no newline before the first row
        pieces[1::2] = body
        return "".join(pieces)
    numbers = range(number + 1, number + taken + 1)
    return "\n".join([f"{n}\t{line}" for n, line in zip(numbers, body, strict=True)])
