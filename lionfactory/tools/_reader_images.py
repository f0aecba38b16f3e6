"""Images for the reader: a ``read`` of a picture answered with a data URL.

`reader_tool(images=True)` sends a ``read`` of a .png, .jpg, .jpeg, .gif or
.webp file here instead of refusing it as binary, so a multimodal model can
look at a screenshot or a plot the code produced. The file is opened once,
through the workspace seam, and checked and read from that one descriptor:
nothing can swap it between a check and the read.

A picture records no read-before-edit evidence: it was not shown as text,
so it proves nothing about the bytes an edit would match.
"""

from __future__ import annotations

import base64
import mimetypes

from lionfactory._os.regular import FileRefused, read_regular, refusal
from lionfactory._os.workspace import Location, PathRefused

__all__ = ["IMAGES_DESCRIPTION", "IMAGE_SUFFIXES", "MAX_IMAGE_BYTES", "is_image", "read_image"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""The suffixes (lower case) a ``read`` answers with a data URL."""

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Images above this size are refused: a data URL of 5 MiB is already ~7 MB of context."""

IMAGES_DESCRIPTION = (
    "\n\n`read` of a .png, .jpg, .jpeg, .gif or .webp file (up to 5 MiB) "
    "returns the image as a base64 data URL in `content`."
)
"""What the reader's description adds when images are on."""


def is_image(loc: Location) -> bool:
    """Whether a ``read`` of `loc` is answered with a data URL (by its suffix)."""
    return loc.path.suffix.lower() in IMAGE_SUFFIXES


def read_image(loc: Location) -> tuple[bool, str]:
    """``(True, data URL)`` for the image at `loc`, or ``(False, why not)``.

    Blocking: call it from a worker thread.
    """
    try:
        data, _ = read_regular(loc, MAX_IMAGE_BYTES)
    except (PathRefused, OSError, FileRefused) as exc:
        return False, refusal(exc, loc.shown, "give an image file.", too_large=_TOO_LARGE_STEP)
    mime = mimetypes.guess_type(loc.name)[0] or "application/octet-stream"
    return True, f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


_TOO_LARGE_STEP = (
    "images above that are not returned. Use bash (e.g. `file` or an image tool) to inspect it."
)
