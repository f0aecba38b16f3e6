"""The served tools on the wire: their listing and their results, per protocol version.

Both transports use this module: the SDK's low-level server (Streamable HTTP,
in-process clients) and lionfactory's own stdio server, which must not import
the SDK (its import is most of a cold start). So it speaks plain JSON-ready
dicts and knows the protocol versions itself.

What depends on the negotiated version:

* ``structuredContent`` in a tool result, and ``outputSchema`` and ``title``
  on a tool, exist from 2025-06-18 on; older clients get the JSON text alone.
* ``annotations`` (with their own ``title``) exist from 2025-03-26 on.

Encoding: `Branch.act` already encodes a result as JSON for the tool
message. That text is the result's text block, and on the stdio path it is
also spliced, as it is, into the reply as ``structuredContent``: one
encoding per result, not three.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from lionfactory._acting import ActionResult, encode_json_string
from lionfactory._echo import echo
from lionfactory._tool import Tool
from lionfactory.mcp._hints import mcp_annotations, output_schema

__all__ = [
    "ERROR_META_KEY",
    "HANDSHAKE_VERSIONS",
    "LATEST_HANDSHAKE_VERSION",
    "ServedTools",
    "at_least",
    "call_result",
    "call_result_json",
    "error_meta",
    "has_structured_content",
    "resource_capability",
    "unknown_tool_message",
]

# The unknown-tool error quotes at most this much of the name a client sent
# (it can be megabytes), and lists the served names up to the second cap.
_NAME_ECHO = 100
_NAMES_LISTED = 2_000


def resource_capability(*, watched: bool) -> dict[str, Any]:
    """The ``resources`` server capability; `watched`: subscriptions and list changes are sent.

    Here rather than on `WorkspaceResources`, whose module loads the
    workspace code: a stdio command line answers ``initialize`` before it
    loads that (`lionfactory.mcp._stdio.answer_initialize`).
    """
    return {"subscribe": watched, "listChanged": watched}


def unknown_tool_message(name: object, served: Iterable[str]) -> str:
    """The ``tools/call`` error for a name that is not served, on every transport.

    Short whatever the client sent: the name is quoted to about
    `_NAME_ECHO` characters, and the served names are listed, sorted, until
    `_NAMES_LISTED` characters, then counted.
    """
    names = sorted(served)
    shown: list[str] = []
    used = 0
    for item in names:
        if shown and used + len(item) + 2 > _NAMES_LISTED:
            break
        shown.append(item)
        used += len(item) + 2
    listing = ", ".join(shown)
    if len(shown) < len(names):
        listing += f" and {len(names) - len(shown):,} more (tools/list names them all)"
    return f"Unknown tool {echo(name, _NAME_ECHO)}. Call one of: {listing}."


KNOWN_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
"""Every protocol revision, oldest first (the SDK's list; a test keeps them equal)."""
HANDSHAKE_VERSIONS = KNOWN_VERSIONS[:4]
"""The revisions reached through the ``initialize`` handshake."""
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[-1]

_ANNOTATIONS_SINCE = "2025-03-26"
_STRUCTURED_SINCE = "2025-06-18"


def at_least(version: str | None, minimum: str) -> bool:
    """Whether `version` is `minimum` or newer; an unknown or missing version is the newest."""
    if version not in KNOWN_VERSIONS:
        return True
    return KNOWN_VERSIONS.index(version) >= KNOWN_VERSIONS.index(minimum)


def has_structured_content(version: str | None) -> bool:
    """Whether results of protocol `version` carry ``structuredContent``."""
    return at_least(version, _STRUCTURED_SINCE)


def _describe(tool: Tool) -> dict[str, Any]:
    """A tool's listing entry in the newest form."""
    entry: dict[str, Any] = tool.schema("mcp")
    if tool.hints is not None:
        entry["title"] = tool.hints.title
        entry["annotations"] = mcp_annotations(tool.hints)
    schema = output_schema(tool)
    if schema is not None:
        entry["outputSchema"] = schema
    return entry


def _for_version(entry: dict[str, Any], version: str | None) -> dict[str, Any]:
    if has_structured_content(version):
        return entry
    older = {k: v for k, v in entry.items() if k not in ("title", "outputSchema")}
    if not at_least(version, _ANNOTATIONS_SINCE):
        older.pop("annotations", None)
    return older


@attrs.define(eq=False)
class ServedTools:
    """The tools one server serves, described once per process.

    Every session's branch is built from the same factories, so one probe
    branch's tools describe them all; the listing is built at most once per
    protocol era and reused for every session and every ``tools/list``.
    """

    tools: tuple[Tool, ...]
    names: frozenset[str] = attrs.field(init=False)
    _entries: tuple[dict[str, Any], ...] | None = attrs.field(default=None, init=False)
    _listings: dict[tuple[bool, bool], list[dict[str, Any]]] = attrs.field(factory=dict, init=False)
    _schemas: dict[str, dict[str, Any]] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.names = frozenset(tool.name for tool in self.tools)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ServedTools:
        """Describe `tools` (a probe branch's, in registration order)."""
        return cls(tuple(tools))

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of tool `name` as listed (shared: do not change it), or None."""
        if self._schemas is None:
            self._schemas = {entry["name"]: entry["inputSchema"] for entry in self.listing(None)}
        return self._schemas.get(name)

    def listing(self, version: str | None) -> list[dict[str, Any]]:
        """The ``tools`` of a ``tools/list`` result for `version` (shared: do not change it)."""
        era = (at_least(version, _ANNOTATIONS_SINCE), has_structured_content(version))
        found = self._listings.get(era)
        if found is None:
            if self._entries is None:
                self._entries = tuple(_describe(tool) for tool in self.tools)
            found = self._listings[era] = [_for_version(e, version) for e in self._entries]
        return found


ERROR_META_KEY = "lionfactory/error"
"""The ``_meta`` key of an error result's machine-readable details (type, validation errors)."""


def _parts(action: ActionResult) -> tuple[str, str | None, bool]:
    """The result's text block, its structured content as JSON text (or None), and isError.

    A call that returned a response sends it as structured content: it is an
    instance of the tool's response model, so it matches the advertised
    ``outputSchema`` even when it reports a typed failure. A call that never
    got that far (invalid arguments, a denial, an unexpected exception) has
    only the error payload ``{error, error_type, errors}``, which matches no
    output schema: clients that validate structured content even on
    ``isError`` results (the TypeScript SDK) would throw instead of showing
    the text, so that result carries the text alone, and the details go in
    ``_meta`` (`error_meta`).
    """
    encoded = action.message.content or "{}"
    if action.result is not None:
        return encoded, encoded, action.failed
    # The text is what Branch.act shows a model: the error, and for invalid
    # input the validation errors in words.
    return action.error or "the call failed", None, True


def error_meta(action: ActionResult) -> dict[str, Any] | None:
    """The ``_meta`` entry of a result without a response: the error's type and details."""
    if action.result is not None:
        return None
    details = {k: v for k, v in action.payload.items() if k != "error"}
    details.setdefault("error_type", action.error_type)
    return {ERROR_META_KEY: details}


def call_result(action: ActionResult, version: str | None) -> dict[str, Any]:
    """A ``tools/call`` result as a JSON-ready dict."""
    text, structured, is_error = _parts(action)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None and has_structured_content(version):
        result["structuredContent"] = action.payload
    meta = error_meta(action)
    if meta is not None:
        result["_meta"] = meta
    return result


def call_result_json(
    action: ActionResult,
    version: str | None,
    meta: Mapping[str, Any] | None = None,
    *,
    members: str = "",
    before: str = "",
    after: str = "",
) -> str:
    """A ``tools/call`` result as JSON text, with the tool message's JSON spliced in as it is.

    Args:
        action: the call's outcome.
        version: the protocol version of the request.
        meta: more ``_meta`` entries (a 2026-07-28 result's server identity).
        members: more members of the result object, as JSON text starting
            with a comma (``',"resultType":"complete"'``).
        before: text before the result (a reply's JSON-RPC envelope).
        after: text after it.

    The parts are joined once: each concatenation of a read's reply copied
    its 45 KB again.
    """
    text, structured, is_error = _parts(action)
    parts = [
        before,
        '{"content":[{"type":"text","text":',
        encode_json_string(text),
        '}],"isError":',
        "true" if is_error else "false",
    ]
    if structured is not None and has_structured_content(version):
        parts += (',"structuredContent":', structured)
    entries = {**(error_meta(action) or {}), **(meta or {})}
    if entries:
        parts += (',"_meta":', json.dumps(entries, ensure_ascii=False))
    parts += (members, "}", after)
    return "".join(parts)
