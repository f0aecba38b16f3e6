"""A new tool made by the recipe in `lionfactory.tools`: one module, one factory.

`word_count_tool()` counts the words of a text. It is what a contributor's
new tool looks like: a request model and a response model (``extra="forbid"``,
a description on every field), an async handler, and a factory returning a
`Tool` that carries its own title, hints and response model, so every surface
(a Branch, MCP, each framework adapter) serves it with no table to update.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Tool, ToolHints

MAX_TEXT_CHARS = 10_000


class WordCountRequest(BaseModel):
    """Arguments of a ``word_count`` call."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The text whose words are counted.")


class WordCountResponse(BaseModel):
    """What a ``word_count`` call returns."""

    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="Whether the words were counted.")
    words: int | None = Field(default=None, description="The number of words.")
    error: str | None = Field(default=None, description="Why not, and what to do instead.")


async def _count(request: WordCountRequest) -> WordCountResponse:
    if len(request.text) > MAX_TEXT_CHARS:
        return WordCountResponse(
            success=False,
            error=f"the text is over {MAX_TEXT_CHARS:,} characters; count it in parts.",
        )
    return WordCountResponse(success=True, words=len(request.text.split()))


def word_count_tool() -> Tool:
    """Build the ``word_count`` tool (safe to share: bound to no branch)."""
    return Tool(
        name="word_count",
        description="Count the words of `text` (split on whitespace).",
        request_model=WordCountRequest,
        handler=_count,
        response_model=WordCountResponse,
        hints=ToolHints.reading("Count words"),
    )
