"""reader_tool(images=True): a read of a picture answered with a data URL."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from lionfactory.tools._reader_images import MAX_IMAGE_BYTES
from lionfactory.tools.reader import reader_tool

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


async def test_images_on_returns_a_data_url(workspace: Path):
    (workspace / "dot.PNG").write_bytes(PNG)
    reader = reader_tool(workspace_root=workspace, images=True)
    result = await reader(action="read", path="dot.PNG")
    assert result["success"] is True
    assert result["content"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert "data URL" in reader.description


async def test_images_off_refuses_the_picture_as_binary(workspace: Path):
    (workspace / "dot.png").write_bytes(PNG)
    reader = reader_tool(workspace_root=workspace)
    result = await reader(action="read", path="dot.png")
    assert result["success"] is False
    assert "data URL" not in reader.description


async def test_an_image_over_the_limit_is_refused(workspace: Path):
    (workspace / "big.png").write_bytes(b"\x89PNG" + b"\0" * MAX_IMAGE_BYTES)
    result = await reader_tool(workspace_root=workspace, images=True)(action="read", path="big.png")
    assert result["success"] is False
    assert "images above" in result["error"]


async def test_an_image_behind_a_symlink_is_refused(workspace: Path, tmp_path: Path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(PNG)
    os.symlink(outside, workspace / "link.png")
    result = await reader_tool(workspace_root=workspace, images=True)(
        action="read", path="link.png"
    )
    assert result["success"] is False
    assert "symbolic link" in result["error"]


async def test_a_directory_named_like_an_image_is_not_a_file(workspace: Path):
    (workspace / "shots.png").mkdir()
    result = await reader_tool(workspace_root=workspace, images=True)(
        action="read", path="shots.png"
    )
    assert (result["success"], result["error"]) == (
        False,
        "'shots.png' is a directory; give an image file.",
    )


def test_images_must_be_a_bool(workspace: Path):
    with pytest.raises(TypeError, match="images must be a bool"):
        reader_tool(workspace_root=workspace, images="yes")  # type: ignore[arg-type]
