"""A new tool made by the recipe in `lionfactory.tools`: one module, one factory.

`word_count_tool()` counts the words of a text file in the workspace. It is
what a contributor's new workspace tool looks like: a request model and a
response model (``extra="forbid"``, a description on every field), a handler
that resolves the path through the `Workspace` and reads it through the one
regular-file seam in a worker thread, and a factory returning a `Tool` that
carries its own title, hints and response model, so every surface (a Branch,
MCP, each framework adapter) serves it with no table to update.
"""

from __future__ import annotations

import os

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Tool, ToolHints
from lionfactory._os.regular import FileRefused, read_regular
from lionfactory._os.workspace import PathRefused, Workspace

MAX_FILE_BYTES = 1_000_000


class WordCountRequest(BaseModel):
    """Arguments of a ``word_count`` call."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The text file whose words are counted, relative to the root.")


class WordCountResponse(BaseModel):
    """What a ``word_count`` call returns."""

    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="Whether the words were counted.")
    words: int | None = Field(default=None, description="The number of words.")
    error: str | None = Field(default=None, description="Why not, and what to do instead.")


@attrs.frozen
class _Counter:
    workspace: Workspace

    def count(self, request: WordCountRequest) -> WordCountResponse:
        try:
            data, _ = read_regular(self.workspace.locate(request.path), MAX_FILE_BYTES)
        except PathRefused as exc:
            return WordCountResponse(success=False, error=exc.message)
        except FileNotFoundError:
            return WordCountResponse(
                success=False, error=f"{request.path!r} does not exist; list the folder first."
            )
        except OSError as exc:
            return WordCountResponse(success=False, error=f"cannot read it: {exc.strerror}.")
        except FileRefused as exc:
            return WordCountResponse(success=False, error=f"{exc.message}; give a text file.")
        return WordCountResponse(success=True, words=len(data.decode("utf-8", "replace").split()))

    async def __call__(self, request: WordCountRequest) -> WordCountResponse:
        return await anyio.to_thread.run_sync(self.count, request)


def word_count_tool(*, workspace_root: str | os.PathLike[str] | None = None) -> Tool:
    """Build the ``word_count`` tool for `workspace_root` (default: the current directory)."""
    return Tool(
        name="word_count",
        description="Count the words of the text file at `path` (split on whitespace).",
        request_model=WordCountRequest,
        handler=_Counter(Workspace.at(workspace_root)),
        response_model=WordCountResponse,
        hints=ToolHints.reading("Count words"),
    )
