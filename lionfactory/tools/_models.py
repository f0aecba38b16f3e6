"""`ToolModel`: the base of the built-in tools' request and response models.

A request model's JSON schema is what the LLM is shown, and its validation
is the boundary the model's arguments cross, so an argument the schema does
not name is refused rather than dropped (``extra="forbid"``). The schema is
built on first use (``defer_build=True``): importing a tool module should not
pay for the validators of every tool the program never calls.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ToolModel"]


class ToolModel(BaseModel):
    """A pydantic model that refuses unknown fields and builds its schema on first use."""

    model_config = ConfigDict(defer_build=True, extra="forbid")
