"""The ``search`` tool's request and response models and limits: the text the model reads.

Kept apart from the factory (`lionfactory.tools.search`) and the handler
(`lionfactory.tools._search_handler`) so that both import them and neither
imports the other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from lionfactory.tools._models import ToolModel
from lionfactory.tools._search_engines import FILE_TYPES

__all__ = [
    "DEFAULT_FIND_RESULTS",
    "DEFAULT_GREP_RESULTS",
    "MAX_CONTEXT",
    "MAX_RESULTS",
    "SearchRequest",
    "SearchResponse",
]

DEFAULT_GREP_RESULTS = 50
DEFAULT_FIND_RESULTS = 100
MAX_RESULTS = 1000
MAX_CONTEXT = 50


class SearchRequest(ToolModel):
    """Arguments of one ``search`` call."""

    action: Literal["grep", "find"] = Field(
        description="'grep' searches file contents; 'find' searches file and directory names."
    )
    pattern: str = Field(
        min_length=1,
        description=(
            "grep: a regular expression (ripgrep syntax), e.g. 'def (load|save)_\\w+'. "
            "find: a glob on names, e.g. '*.py' or 'test_*'."
        ),
    )
    path: str = Field(
        default=".",
        description="Directory or file to search, relative to the workspace root (default '.').",
    )
    include: str | None = Field(
        default=None,
        description=(
            "grep only: search only files whose name matches this glob, e.g. '*.py' "
            "(*, ? and [...]; no '/', no braces). Use either include or type."
        ),
    )
    type: str | None = Field(
        default=None,
        description=(
            "grep only: search only files of this type: "
            + ", ".join(f"{name} ({' '.join(globs)})" for name, globs in FILE_TYPES.items())
            + "."
        ),
    )
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        default="content",
        description=(
            "grep only: 'content' shows matching lines (default); 'files_with_matches' "
            "only the paths of matching files; 'count' the number of matching lines per file."
        ),
    )
    before: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=f"grep content only: lines of context before each match (0-{MAX_CONTEXT}).",
    )
    after: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=f"grep content only: lines of context after each match (0-{MAX_CONTEXT}).",
    )
    context: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=(
            f"grep content only: lines of context before and after each match "
            f"(0-{MAX_CONTEXT}); give either context or before/after."
        ),
    )
    case_insensitive: bool = Field(
        default=False, description="grep only: match regardless of case (default false)."
    )
    multiline: bool = Field(
        default=False,
        description=(
            "grep only: let a match span lines: \\n in the pattern matches a line break "
            "('.' still does not). Default false."
        ),
    )
    include_ignored: bool = Field(
        default=False,
        description=(
            "Also search files that .gitignore, .ignore or git's exclude files ignore "
            "(virtualenvs, node_modules, build output). Default false."
        ),
    )
    max_results: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RESULTS,
        description=(
            f"Most results to show: default {DEFAULT_GREP_RESULTS} for grep and "
            f"{DEFAULT_FIND_RESULTS} for find, at most {MAX_RESULTS}."
        ),
    )
    head_limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RESULTS,
        description="Another name for max_results; give one of them.",
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None and value not in FILE_TYPES:
            raise ValueError(
                f"unknown file type {value!r}; use one of {', '.join(FILE_TYPES)}, "
                f"or a glob in include"
            )
        return value

    @field_validator("include")
    @classmethod
    def _plain_glob(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or "{" in value or "}" in value):
            raise ValueError(
                f"include is one glob on file names with *, ? and [...], without '/' or braces "
                f"(got {value!r}); search a directory with path, or use type"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SearchRequest:
        if self.context is not None and (self.before is not None or self.after is not None):
            raise ValueError("give either context, or before and/or after, not both")
        if (
            self.max_results is not None
            and self.head_limit is not None
            and self.max_results != self.head_limit
        ):
            raise ValueError(
                f"max_results ({self.max_results}) and head_limit ({self.head_limit}) are the "
                f"same setting; give one of them"
            )
        if self.include is not None and self.type is not None:
            raise ValueError("give either include or type, not both")
        lines = [n for n in ("context", "before", "after") if getattr(self, n) is not None]
        if lines and self.output_mode != "content":
            raise ValueError(
                f"{', '.join(lines)} add context lines to output_mode 'content'; "
                f"drop them for {self.output_mode!r}"
            )
        return self


class SearchResponse(ToolModel):
    """The outcome of one ``search`` call."""

    success: bool = Field(description="Whether the search ran (finding nothing is a success).")
    content: str | None = Field(
        default=None, description="The results, one per line, paths relative to the root."
    )
    count: int = Field(default=0, description="How many results are shown.")
    total: int = Field(default=0, description="How many results were found.")
    truncated: bool = Field(
        default=False, description="True when some results were left out (count < total)."
    )
    error: str | None = Field(default=None, description="Why the search failed, and what to do.")
    engine: Literal["ripgrep", "builtin"] | None = Field(
        default=None,
        description="Which engine ran: 'ripgrep', or 'builtin' (grep and a Python walk).",
    )
    ignore_rules: Literal["applied", "not applied"] | None = Field(
        default=None,
        description=(
            "'applied': paths ignored by .gitignore/.ignore/git excludes were skipped; "
            "'not applied': include_ignored was set."
        ),
    )
    ignored: int | None = Field(
        default=None,
        description=(
            "How many ignored paths were skipped (an ignored directory counts once); null "
            "when the engine does not count them (ripgrep)."
        ),
    )
    notice: str | None = Field(default=None, description="Notes on the answer, if any.")
