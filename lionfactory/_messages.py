"""Messages and the message log: the full record and the active view.

A `Message` is immutable and shared freely, between views and between
branches: cloning a branch copies references, never messages.

`MessageLog` keeps two things:

* the **record**, every message ever appended, in order, append-only;
* the **active view**, the ordered subset the model sees.

Evicting and compacting change only the view. Each record entry has a
*sort key*, its chronological place: an appended message's key is its own
record index, ``(i,)``; a compaction summary's key is the key of the earliest
message it replaces followed by its own record index, so it sorts right where
that message sat (after it, should that message come back, and before
everything that followed it). The view is always sorted by these keys, so
restoring a message puts it back exactly where it was, and a summary sits
where its span was, also when it summarises an earlier summary.
When restoring brings back every message a summary stood for, the summary
retires from the view (it stays in the record), so compact-then-restore
round-trips the view.

There is at most one system message. It is pinned at view index 0: it cannot
be evicted or compacted, and `set_system` replaces it in place.

A chat model answers with a `ModelReply`; `ChatModel` is the protocol the
agent loop talks to (the end of this module).
"""

from __future__ import annotations

import bisect
import collections
import copy
import functools
import itertools
import json
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    Required,
    TypeVar,
    cast,
    get_type_hints,
    runtime_checkable,
)

import attrs
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator
from typing_extensions import TypedDict

from lionfactory._echo import shorten

if TYPE_CHECKING:
    from lionfactory._tool import Tool

__all__ = [
    "ChatModel",
    "Message",
    "MessageLog",
    "ModelReply",
    "Role",
    "ToolCall",
    "call_message",
    "encode_json",
    "encode_json_string",
    "estimate_tokens",
    "messages_from_json",
    "messages_to_compact_json",
    "new_tool_call",
    "tool_message",
]

Role = Literal["system", "user", "assistant", "tool"]


MAX_ARGUMENT_DEPTH = 100
"""Deepest nesting of tool-call arguments kept: real schemas nest a handful of
levels, and deeper data would crash JSON encoding (it recurses) later on."""

MAX_ARGUMENT_INT_BITS = 10_000
"""Largest integer (in bits, about 3,000 digits) kept in arguments: Python refuses
to turn integers past 4,300 digits into text, so a larger one could never be
sent back to a provider or saved."""


def encodable(text: str) -> str:
    r"""`text` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    A lone surrogate (``"\ud800"`` decoded from JSON) is a valid Python
    string that no UTF-8 writer accepts; a message holding one would make every
    later request and every save of the branch fail.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def arguments_problem(arguments: Any) -> str | None:
    """Why `arguments` cannot be kept in a message, or None when they can.

    One iterative walk (no recursion, linear in the size): nesting deeper than
    `MAX_ARGUMENT_DEPTH`, an integer larger than `MAX_ARGUMENT_INT_BITS`, or a
    string or key holding a lone surrogate.
    """
    stack: list[tuple[Any, int]] = [(arguments, 0)]
    push = stack.append
    while stack:
        value, depth = stack.pop()
        # Exact types first: the common argument values (ASCII text, small
        # numbers, flags) cost one comparison each; subclasses take the
        # isinstance chain below.
        kind = type(value)
        if kind is str:
            if not value.isascii() and encodable(value) is not value:
                return "a string contains a lone surrogate (invalid Unicode)"
            continue
        if kind is bool or kind is float or value is None:
            continue
        if kind is int and -_SMALL_INT < value < _SMALL_INT:
            continue
        if isinstance(value, str):
            if encodable(value) is not value:
                return "a string contains a lone surrogate (invalid Unicode)"
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if value.bit_length() > MAX_ARGUMENT_INT_BITS:
                return f"an integer has about {int(value.bit_length() * 0.30103):,} digits"
        elif isinstance(value, (dict, list, tuple)):
            if depth >= MAX_ARGUMENT_DEPTH:
                return f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            depth += 1
            if isinstance(value, dict):
                for key in value:
                    push((key, depth))
                for item in value.values():
                    push((item, depth))
            else:
                for item in value:
                    push((item, depth))
    return None


_SMALL_INT = 1 << 62
"""Integers inside this range are far below `MAX_ARGUMENT_INT_BITS` (no bit count needed)."""


# The same ids as ``uuid.uuid4().hex`` without building a UUID object or asking
# the kernel for 16 bytes each time, which was a tenth of `Branch.act`'s own
# cost (three ids a call). The bytes come from ``os.urandom`` as before,
# `_ID_BATCH` ids' worth at once; the version and variant bits are set on the
# whole batch by two byte translations, then its hex text is cut in ids (half
# the cost of masking each id as an integer). A forked child drops what its
# parent had drawn, so the two never hand out the same id.
_UUID4_VERSION = bytes((byte & 0x0F) | 0x40 for byte in range(256))
"""Byte 6 of a version-4 UUID: its high nibble is the version, 4."""
_UUID4_VARIANT = bytes((byte & 0x3F) | 0x80 for byte in range(256))
"""Byte 8: its two high bits are the RFC 4122 variant, 10."""
_ID_BATCH = 64
_IDS: list[str] = []


def _draw_ids() -> None:
    data = bytearray(os.urandom(16 * _ID_BATCH))
    data[6::16] = data[6::16].translate(_UUID4_VERSION)
    data[8::16] = data[8::16].translate(_UUID4_VARIANT)
    text = data.hex()
    _IDS.extend(text[i : i + 32] for i in range(0, len(text), 32))


os.register_at_fork(after_in_child=_IDS.clear)


def _new_id() -> str:
    """A random version-4 UUID as 32 hex digits (what ``uuid.uuid4().hex`` gives)."""
    while True:
        try:
            return _IDS.pop()
        except IndexError:  # none left (another thread may take the last one first)
            _draw_ids()


def _new_call_id() -> str:
    return "call_" + _new_id()[:24]


def _now() -> datetime:
    return datetime.now(UTC)


class ToolCall(BaseModel):
    """One tool call requested by the model.

    Attributes:
        id: the call id the model (or the branch) assigned.
        name: the tool's name.
        arguments: the arguments, already parsed from JSON.
        arguments_error: why the model's arguments could not be parsed (a
            chat model adapter sets it for malformed JSON; the branch then
            answers the call with a `ToolInputError` instead of running it).
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str = Field(default_factory=_new_call_id)
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _keep_only_what_encodes(cls, data: Any) -> Any:
        """Arguments that could not be encoded again are replaced by ``{}`` and a reason.

        The call still reaches the branch, which answers it with a
        `ToolInputError`; the message log never holds a value that would make
        the next request or a save fail.
        """
        if not isinstance(data, dict) or "arguments" not in data:
            return data
        problem = arguments_problem(data["arguments"])
        if problem is None:
            return data
        return {**data, "arguments": {}, "arguments_error": problem}

    @field_validator("id", "name", "arguments_error")
    @classmethod
    def _encodable_text(cls, value: str | None) -> str | None:
        return None if value is None else _kept_text(value)


_KEPT_TEXT = 1_000
"""The characters of a call's id, tool name or arguments error the log keeps."""


def _kept_text(value: str) -> str:
    """A call's id, tool name or arguments error as the log keeps it: short and encodable."""
    # No tool name is longer than 64 characters: a longer one can never
    # match, and the log keeps only a recognisable prefix of it.
    return encodable(shorten(value, _KEPT_TEXT))


_new = object.__new__
# The setters of `BaseModel`'s own slots and of its ``__dict__``, called
# directly: a third faster than ``object.__setattr__`` finding them by name,
# four times a record.
_set_dict: Callable[[BaseModel, dict[str, Any]], None] = BaseModel.__dict__["__dict__"].__set__
_set_fields_set: Callable[[BaseModel, set[str]], None] = BaseModel.__dict__[
    "__pydantic_fields_set__"
].__set__
_set_extra: Callable[[BaseModel, None], None] = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private: Callable[[BaseModel, None], None] = BaseModel.__dict__["__pydantic_private__"].__set__
_Model = TypeVar("_Model", bound=BaseModel)


def _assembled(cls: type[_Model], values: dict[str, Any], given: set[str]) -> _Model:
    """An instance of `cls` holding `values`, every field in order, exactly as validation left them.

    What ``cls.model_construct`` does, without its per-field loop over
    aliases and defaults, which cost as much as validating a message: every
    `Branch.act` builds three records. Only for values the caller has
    checked the way validation would (a test compares the two, field by
    field, so a pydantic release that stores instances differently fails
    there); `given` is what validation would record as the fields set.

    One `given` set is shared by every record of a shape, as
    ``model_construct(_fields_set=...)`` would share it: a frozen model
    never changes its fields set, and pydantic copies it before a
    ``model_copy`` changes the copy's. A set of its own per record was three
    of the ten objects `Branch.act` leaves in the log for the garbage
    collector to traverse, and its pauses are about 30% of act's overhead.
    """
    # ``object.__new__`` itself (the models define no ``__new__``, a test
    # checks): ``cls.__new__`` is read through pydantic's metaclass, whose
    # ``__getattr__`` makes every class attribute read a slow one.
    instance = _new(cls)
    _set_dict(instance, values)
    _set_fields_set(instance, given)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


# The fields each assembled record's validation would record as set (see `_assembled`).
_GIVEN_CALL = {"name", "arguments"}
_GIVEN_CALL_WITH_ID = {"id", "name", "arguments"}
_GIVEN_CALL_MESSAGE = {"role", "tool_calls", "metadata"}
_GIVEN_TOOL_MESSAGE = {"role", "content", "call_id", "tool", "metadata"}


def _plain(arguments: dict[Any, Any]) -> bool:
    """Whether `arguments` are flat: ASCII string keys, values ASCII text, flags, small numbers.

    Most calls' arguments are; for them `arguments_problem` has nothing to
    find, and this one pass is a third of its walk.
    """
    for key, value in arguments.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return False
        elif kind is int:
            if not -_SMALL_INT < value < _SMALL_INT:
                return False
        elif not (kind is bool or kind is float or value is None):
            return False
    return True


def _str_keys(mapping: dict[Any, Any]) -> bool:
    """Whether every key is exactly a `str` (what a ``dict[str, Any]`` field keeps as it is)."""
    return not mapping or all(type(key) is str for key in mapping)


def new_tool_call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> ToolCall:
    """The call ``ToolCall(name=name, arguments=arguments)`` validates, with `call_id` if given.

    The checks are validation's own, made here in the common case (a plain
    name, a plain dict with string keys whose values `arguments_problem`
    accepts); anything else goes through validation. `arguments` becomes the
    call's (validation would copy it: pass a dict of your own). A host's
    `call_id` is set as given, unvalidated, as ``model_copy`` sets it: a
    host finds its recorded answers by its own ids.
    """
    if (
        type(name) is str
        and type(arguments) is dict
        and (_plain(arguments) or (_str_keys(arguments) and arguments_problem(arguments) is None))
    ):
        return _assembled(
            ToolCall,
            {
                # `_new_call_id` and `_kept_text`'s common case (a short ASCII
                # name is kept as it is), inline: every `Branch.act` runs this.
                "id": "call_" + _new_id()[:24] if call_id is None else call_id,
                "name": name if len(name) <= _KEPT_TEXT and name.isascii() else _kept_text(name),
                "arguments": arguments,
                "arguments_error": None,
            },
            _GIVEN_CALL if call_id is None else _GIVEN_CALL_WITH_ID,
        )
    call = ToolCall(name=name, arguments=arguments)
    return call if call_id is None else call.model_copy(update={"id": call_id})


class Message(BaseModel):
    """An immutable conversation message; roles map one-to-one onto provider formats.

    Attributes:
        id: unique id.
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: the text the model sees (JSON text for tool results).
        tool_calls: calls requested by an assistant message.
        call_id: for a tool message, the call it answers.
        tool: for a tool message, the tool's name.
        sender: who sent it (inter-branch messages).
        recipient: who it is for (inter-branch messages).
        channel: the exchange channel it travelled on.
        created_at: creation time (UTC).
        metadata: facts the model does not see (file evidence, summaries'
            coverage). Treat it as read-only: messages are shared.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str = Field(default_factory=_new_id)
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str | None = None
    tool: str | None = None
    sender: str | None = None
    recipient: str | None = None
    channel: str | None = None
    created_at: datetime = Field(default_factory=_now)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("content")
    @classmethod
    def _encodable_content(cls, value: str) -> str:
        return encodable(value)


class _StoredMessage(TypedDict, total=False):
    """A `Message`'s fields as JSON holds them: `messages_from_json` validates these."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    id: str
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...]
    call_id: str | None
    tool: str | None
    sender: str | None
    recipient: str | None
    channel: str | None
    created_at: datetime
    metadata: dict[str, Any]


_GIVEN_ALL = set(Message.model_fields)
"""The fields set of a message whose JSON names every field (what ``model_dump_json`` writes)."""


@functools.cache
def _stored_messages() -> TypeAdapter[list[_StoredMessage]]:
    """The validator of a JSON message list, built on first use (building it costs import time)."""
    return TypeAdapter(list[_StoredMessage])


@functools.cache
def _compact_messages_in() -> pydantic_core.SchemaValidator:
    """The validator of a `messages_to_compact_json` list, built on first use.

    `_StoredMessage` with the fields that writer always writes required, and
    every other field taking its default where it is left out: pydantic
    fills them in as it builds each message's dict, in field order, which
    cost a third of what merging each dict over the defaults afterwards did
    (a new dict per message, grown past its first size). The schema is
    pydantic's own for the typed dict, each optional field's schema wrapped
    in its default, so what is there is validated exactly as before.
    """
    fields = {
        name: Required[kind] if name in ("id", "role", "created_at") else kind
        for name, kind in get_type_hints(_StoredMessage).items()
    }
    typed_dict: Any = TypedDict  # its fields are computed, which type checkers cannot follow
    compact = typed_dict("_CompactMessage", fields, total=False)
    compact.__pydantic_config__ = ConfigDict(extra="forbid")
    schema: Any = copy.deepcopy(TypeAdapter(list[compact]).core_schema)  # type: ignore[valid-type]
    record = schema.get("items_schema", {})
    if (
        schema.get("type") != "list"
        or record.get("type") != "typed-dict"
        or list(record.get("fields", ())) != list(Message.model_fields)
    ):  # pragma: no cover - a pydantic release that lays the schema out otherwise
        raise RuntimeError("the compact message schema is not the typed dict it was built as")
    cs = pydantic_core.core_schema
    for name, field in record["fields"].items():
        if not field["required"]:
            field["schema"] = (
                # A dict of its own per message, as validation makes.
                cs.with_default_schema(field["schema"], default_factory=dict)
                if name == "metadata"
                else cs.with_default_schema(field["schema"], default=_DEFAULTS[name])
            )
    return pydantic_core.SchemaValidator(schema)


def messages_from_json(data: bytes | str, *, defaults_left_out: bool = False) -> list[Message]:
    """The messages of a JSON array, as ``TypeAdapter(list[Message]).validate_json`` gives them.

    One validation of the whole array into plain dicts, then each message
    assembled from its dict (`_assembled`): validating into models made a
    fields-set and ran a Python validator per message, and was half of a
    10,000-message load. The content validator has nothing to do here:
    pydantic_core's JSON parser refuses a lone surrogate escape, so JSON
    text holds none. A message that leaves out fields (not one
    ``model_dump_json`` wrote) goes through `Message` itself, for its
    defaults.

    With `defaults_left_out` the array is one `messages_to_compact_json`
    wrote: each message has its id, role and creation time (a message
    without them is refused), gets the fields it leaves out back as their
    defaults, and every field counts as set, so it is the message that was
    saved. Every field that is there is validated as above.

    Raises:
        pydantic.ValidationError: the data is not a JSON array of messages.
    """
    records: list[Any]
    if defaults_left_out:
        # Every field there, in field order: the validator fills in the defaults.
        records = _compact_messages_in().validate_json(data)
    else:
        records = cast("list[Any]", _stored_messages().validate_json(data))
    n = len(records)
    if min(map(len, records), default=_COMPLETE) != _COMPLETE:
        return [
            _assembled(Message, fields, _GIVEN_ALL)
            if len(fields) == _COMPLETE
            else Message.model_validate(fields)
            for fields in records
        ]
    # `_assembled`, one step at a time over the whole record: each step is one
    # call into C per message (a Python loop over them took a quarter longer).
    out = list(map(Message.__new__, itertools.repeat(Message, n)))
    _exhaust(map(_set_dict, out, records))
    _exhaust(map(_set_fields_set, out, itertools.repeat(_GIVEN_ALL, n)))
    _exhaust(map(_set_extra, out, itertools.repeat(None, n)))
    _exhaust(map(_set_private, out, itertools.repeat(None, n)))
    return out


_COMPLETE = len(_GIVEN_ALL)
_exhaust: Callable[[Iterator[Any]], Any] = functools.partial(collections.deque, maxlen=0)
"""Run an iterator to its end, keeping nothing (``deque(it, maxlen=0)``)."""

_DEFAULTS: dict[str, Any] = {
    name: field.default
    for name, field in Message.model_fields.items()
    if name not in ("id", "role", "created_at", "metadata")
}
"""The defaults of the fields `messages_to_compact_json` may leave out, but the metadata (whose
default is a new dict). The id, role and creation time are always there."""


@functools.cache
def _compact_messages() -> pydantic_core.SchemaSerializer:
    """The serializer of `messages_to_compact_json`, built on first use.

    It writes each message's ``__dict__`` as a typed dict: pydantic's own
    serializer of a model, under ``exclude_defaults``, calls a default
    factory to compare each value with (a new id and a clock read per
    message). Here the id and the creation time have no default, so they
    are always written, and a call is written whole from its ``__dict__``.
    """
    cs = pydantic_core.core_schema
    text, optional = cs.str_schema(), cs.nullable_schema(cs.str_schema())
    mapping = cs.dict_schema(text, cs.any_schema())

    def record(schemas: dict[str, Any]) -> Any:
        return cs.typed_dict_schema(
            {name: cs.typed_dict_field(schema) for name, schema in schemas.items()}
        )

    call = record({"id": text, "name": text, "arguments": mapping, "arguments_error": optional})
    calls = cs.plain_serializer_function_ser_schema(_call_dicts, return_schema=cs.list_schema(call))
    schemas: dict[str, Any] = {
        "id": text,
        "role": text,
        "content": cs.with_default_schema(text, default=""),
        "tool_calls": cs.with_default_schema(cs.any_schema(serialization=calls), default=()),
        **{
            name: cs.with_default_schema(optional, default=None)
            for name in ("call_id", "tool", "sender", "recipient", "channel")
        },
        "created_at": cs.datetime_schema(),
        "metadata": cs.with_default_schema(mapping, default={}),
    }
    if list(schemas) != list(Message.model_fields):  # pragma: no cover - a new field
        raise RuntimeError("the compact message serializer does not match Message's fields")
    return pydantic_core.SchemaSerializer(cs.list_schema(record(schemas)))


def _call_dicts(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [call.__dict__ for call in calls]


_dict_of = attrgetter("__dict__")


def messages_to_compact_json(messages: list[Message]) -> bytes:
    """`messages` as a JSON array, each message without the fields that hold their defaults.

    What ``TypeAdapter(list[Message]).dump_json`` writes, less the empty
    content, calls and metadata and the null ids and names: a stored
    branch's message is mostly those, and each one left out is a value less
    to validate when it is loaded (`messages_from_json` with
    ``defaults_left_out`` restores them).
    """
    return _compact_messages().to_json(list(map(_dict_of, messages)), exclude_defaults=True)


def call_message(calls: tuple[ToolCall, ...], metadata: dict[str, Any]) -> Message:
    """The assistant message carrying a host's own `calls` (no text), as validation builds it.

    The calls are `ToolCall` instances (validated when they were made, and
    kept as they are by validation too); `metadata` becomes the message's,
    and must have string keys.
    """
    return _assembled(
        Message,
        {
            "id": _new_id(),
            "role": "assistant",
            "content": "",
            "tool_calls": calls,
            "call_id": None,
            "tool": None,
            "sender": None,
            "recipient": None,
            "channel": None,
            "created_at": datetime.now(UTC),  # `_now`, without its frame
            "metadata": metadata,
        },
        _GIVEN_CALL_MESSAGE,
    )


def tool_message(call: ToolCall, content: str, metadata: dict[str, Any]) -> Message:
    """The tool message answering `call` with `content`; `metadata` becomes the message's.

    Validation's checks, made here: the content made encodable, the call id
    and every metadata key plain strings (a tool writes the metadata, a host
    the call id; anything else goes through validation, which refuses it).
    """
    call_id = call.id
    if type(call_id) is not str or (metadata and not _str_keys(metadata)):
        return Message(
            role="tool", content=content, call_id=call_id, tool=call.name, metadata=metadata
        )
    return _assembled(
        Message,
        {
            "id": _new_id(),
            "role": "tool",
            "content": content if content.isascii() else encodable(content),
            "tool_calls": (),
            "call_id": call_id,
            "tool": call.name,
            "sender": None,
            "recipient": None,
            "channel": None,
            "created_at": datetime.now(UTC),  # `_now`, without its frame
            "metadata": metadata,
        },
        _GIVEN_TOOL_MESSAGE,
    )


# Tokens per message for role markers and separators; the figure providers
# document for chat formats. Characters per token: 4 for English text.
_MESSAGE_OVERHEAD = 4
_CHARS_PER_TOKEN = 4


def estimate_tokens(messages: Iterable[Message]) -> int:
    """Estimate the tokens `messages` cost a model: deterministic and offline.

    A tokenizer would need a download and differs per provider; four
    characters per token plus a fixed per-message overhead is within the
    precision that context budgeting needs.
    """
    return sum(map(_message_tokens, messages))


# Strings at least this long are escaped by pydantic_core (Rust) instead of
# the json module's C escaper: measured, the call into pydantic_core costs
# more than it saves below about 128 characters, and escapes a 20 KB file's
# rows about four times faster above.
_FAST_ESCAPE_CHARS = 128


def encode_json_string(text: str) -> str:
    """``json.dumps(text, ensure_ascii=False)``, the same text, escaped faster when long.

    A tool result's text is escaped once for the tool message and, on the MCP
    server, once more as the result's text block: for a 20 KB read the json
    module's escaper was a tenth of the whole call. pydantic_core escapes
    exactly the characters json does, the same way (a test compares them on
    every code point); a lone surrogate, which it cannot encode as UTF-8,
    goes to the json module as before.
    """
    if len(text) >= _FAST_ESCAPE_CHARS:
        try:
            return pydantic_core.to_json(text).decode("utf-8")
        except ValueError:
            pass
    return _escape(text)


_escape: Callable[[str], str] = json.encoder.encode_basestring

# ``json.dumps(value, ensure_ascii=False, default=str)`` builds an encoder per
# call, about half the cost of encoding a small value; a shared one writes the
# same text (each ``encode`` makes its own C encoder, so threads may share it).
_JSON = json.JSONEncoder(ensure_ascii=False, default=str)


def encode_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, default=str)``: the same text, made faster.

    A tool's response is a flat mapping whose cost is its long strings (file
    rows, command output): those are escaped by `encode_json_string`, the
    separators are json's own (``", "`` and ``": "``), and every other value
    goes through ``json.dumps`` itself, so numbers, nesting, `default` and
    the errors json raises (a circular reference, an integer too long to
    print) are json's. Anything but a dict with string keys is encoded by
    ``json.dumps`` whole.

    Raises:
        ValueError, RecursionError, TypeError: as ``json.dumps`` would.
    """
    if type(value) is not dict:
        return _JSON.encode(value)
    parts = []
    for key, item in value.items():
        if type(key) is not str:
            return _JSON.encode(value)
        if type(item) is str:
            encoded = encode_json_string(item)
        elif item is None:
            encoded = "null"
        elif item is True:
            encoded = "true"
        elif item is False:
            encoded = "false"
        elif type(item) is int:
            # What json writes for an int, and the same ValueError past
            # Python's digit limit.
            encoded = int.__repr__(item)
        else:
            encoded = _JSON.encode(item)
        parts.append(f"{_escape(key)}: {encoded}")
    return "{" + ", ".join(parts) + "}"


_id_of = attrgetter("id")
_role_of = attrgetter("role")


def _message_tokens(message: Message) -> int:
    chars = len(message.content)
    for call in message.tool_calls:
        chars += len(call.name) + len(encode_json(call.arguments))
    return _MESSAGE_OVERHEAD + -(-chars // _CHARS_PER_TOKEN)


_KEY_TYPES = {list, tuple}
"""What a sort key may be for `_appended_first_key`: a `state` tuple, or a list from JSON."""
_INT = {int}


def _appended_first_key(
    keys: list[tuple[int, ...]], active: list[int], summaries: dict[int, tuple[int, ...]]
) -> tuple[int, ...] | None:
    """The first sort key, as a tuple, if `from_state` would find these parts in append order.

    That is: no summaries, the view every record index in order (exact
    ints: a float index is left to the general path, which refuses it), the
    first key ``(-1, 0)`` or ``(0,)`` and every later one a list or tuple
    holding just its own record index. Otherwise None, and the general
    path decides, raising what it raises. Each check is one call into C
    over the parts (no tuple per key, no sort); none raises or consumes
    anything (iterators and other types get None). `from_state` still
    checks the ids and the roles.
    """
    n = len(keys)
    if not (
        n
        and type(keys) is list
        and type(active) is list
        and type(summaries) is dict
        and not summaries
        and type(keys[0]) in _KEY_TYPES
    ):
        return None
    first = tuple(keys[0])
    if first != (-1, 0) and first != (0,):
        return None
    if not (set(map(type, active)) <= _INT and active == list(range(n))):
        return None
    rest = keys[1:]
    # Each later key holds at least one item and, flattened, they are
    # exactly 1, 2, ..., n - 1: so each holds one, its own index.
    if not (
        set(map(type, rest)) <= _KEY_TYPES
        and min(map(len, rest), default=1) >= 1
        and list(itertools.chain.from_iterable(rest)) == list(range(1, n))
    ):
        return None
    return first


class MessageLog:
    """The full record of a conversation and the active view the model sees.

    Positions in the active view are "view indices"; positions in the record
    are "record indices". Methods say which they take.
    """

    __slots__ = (
        "_active",
        "_active_tokens",
        "_append_order",
        "_counted",
        "_index",
        "_keys",
        "_record",
        "_shared",
        "_summaries",
        "_tokens",
    )

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._record: list[Message] = []
        # The sort keys of the record's first entries (see `_key`): every
        # entry after them was appended and has the key ``(i,)``, made when a
        # key is read. Two such tuples a `Branch.act` (its two messages) were
        # a fifth of what an act left for the garbage collector to track.
        self._keys: list[tuple[int, ...]] = []
        # Each message's token estimate, and the running total of the view,
        # made when asked (`_count`), for the messages appended since: nudges
        # ask after every tool call, while an append estimating its message
        # (a JSON dump of a call's arguments) was a tenth of `Branch.act`'s
        # overhead, and a load estimated every message it restored. The
        # first `_counted` record entries are in the total; every entry after
        # them is in the view (whatever changes the view counts first), but
        # when none is counted, where the view may be anything (`from_state`).
        self._tokens: list[int] = []
        self._counted = 0
        self._active_tokens = 0
        self._active: list[int] = []
        self._index: dict[str, int] = {}
        # summary record index -> record indices it replaced
        self._summaries: dict[int, tuple[int, ...]] = {}
        # True while the containers above are shared with a copy (`copy`):
        # the first change copies them (`_writable`), so a clone of a branch
        # with many messages costs no per-message memory until it diverges.
        self._shared = False
        # See `in_append_order`: every change that could end it sets it False.
        self._append_order = True
        for message in messages:
            self.append(message)

    # -- reading -------------------------------------------------------------

    @property
    def record(self) -> Sequence[Message]:
        """Every message ever appended, in order (read-only)."""
        return tuple(self._record)

    @property
    def active(self) -> list[Message]:
        """The active view: the messages the model sees, in order (a new list)."""
        record = self._record
        return [record[i] for i in self._active]

    @property
    def system(self) -> Message | None:
        """The pinned system message, if any."""
        if self._active and self._record[self._active[0]].role == "system":
            return self._record[self._active[0]]
        return None

    def __len__(self) -> int:
        """The number of messages in the active view."""
        return len(self._active)

    def __iter__(self) -> Iterator[Message]:
        """Iterate over the active view."""
        record = self._record
        return (record[i] for i in self._active)

    def __getitem__(self, view_index: int) -> Message:
        return self._record[self._active[view_index]]

    @property
    def total(self) -> int:
        """The number of messages in the record."""
        return len(self._record)

    def record_since(self, start: int) -> list[Message]:
        """The record from record index `start` on: O(new messages), not O(record)."""
        return self._record[start:]

    def get(self, message_id: str) -> Message | None:
        """The message with this id, active or not."""
        index = self._index.get(message_id)
        return None if index is None else self._record[index]

    def record_index(self, message_id: str) -> int:
        """The record index of a message id (KeyError if unknown)."""
        return self._index[message_id]

    def is_active(self, message_id: str) -> bool:
        """Whether the message is in the active view."""
        index = self._index.get(message_id)
        if index is None:
            return False
        pos = bisect.bisect_left(self._active, self._key(index), key=self._key)
        return pos < len(self._active) and self._active[pos] == index

    def estimate_tokens(self) -> int:
        """Estimated tokens of the active view (see `estimate_tokens`).

        O(messages appended since it was last asked): each message is
        estimated once.
        """
        self._count()
        return self._active_tokens

    def in_append_order(self) -> bool:
        """Whether the view is the whole record, in record order, as appending it gave.

        That is: a view index is a record index, nothing was summarised,
        only the first entry may be a system message, and the log is what
        appending its record in order to a new log gives. O(1), so it may
        answer False for such a log: one whose view was changed and changed
        back (an eviction restored) does.
        """
        return self._append_order

    # -- changing ------------------------------------------------------------

    def append(self, message: Message) -> Message:
        """Append a message to the record and the end of the view.

        Raises:
            ValueError: for a second system message (use `set_system`) or a
                message id already in the record.
        """
        if self._shared:
            self._writable()
        index = len(self._record)
        if message.role != "system":
            # `_add_record` inlined (every `Branch.act` appends twice); the key is
            # implied. The id is read once: a model's attribute reads are slow ones.
            message_id = message.id
            if message_id in self._index:
                raise ValueError(f"message id {message_id!r} is already in the log")
            self._record.append(message)
            self._index[message_id] = index
            self._active.append(index)
        elif self._pinned_index() is not None:
            raise ValueError("the log already has a system message; use set_system() to replace it")
        else:
            # A system message is pinned first, whatever came before it.
            self._add_record(message, (-1, index))
            self._append_order = self._append_order and index == 0
            self._active.insert(0, index)
        return message

    def set_system(self, content: str) -> Message:
        """Set or replace the system message, keeping it pinned at view index 0.

        The previous system message stays in the record but leaves the view.
        """
        self._writable()
        self._count()
        message = Message(role="system", content=content)
        index = len(self._record)
        self._append_order = self._append_order and index == 0
        self._add_record(message, (-1, index))
        if self.system is not None:
            self._active_tokens -= self._tokens[self._active[0]]
            self._active[0] = index
        else:
            self._active.insert(0, index)
        return message

    def evict(self, start: int, end: int | None = None) -> list[Message]:
        """Remove view span ``[start:end)`` from the active view (the record keeps it).

        Python slice rules apply after clamping; the pinned system message is
        never evicted (a start of 0 becomes 1 when one exists).

        Returns:
            The evicted messages, in order.
        """
        self._writable()
        self._count()
        lo, hi = self._clamp(start, end)
        removed = self._active[lo:hi]
        del self._active[lo:hi]
        self._append_order = self._append_order and not removed
        self._active_tokens -= sum(self._tokens[i] for i in removed)
        return [self._record[i] for i in removed]

    def evict_ids(self, message_ids: Iterable[str]) -> list[Message]:
        """Remove the given messages from the active view; unknown or inactive ids are skipped."""
        self._writable()
        self._count()
        drop = {self._index[m] for m in message_ids if m in self._index}
        drop.discard(self._pinned_index())
        kept: list[int] = []
        removed: list[Message] = []
        for index in self._active:
            if index in drop:
                removed.append(self._record[index])
                self._active_tokens -= self._tokens[index]
            else:
                kept.append(index)
        self._active = kept
        self._append_order = self._append_order and not removed
        return removed

    def restore(self, start: int = 0, end: int | None = None) -> list[Message]:
        """Put record span ``[start:end)`` back into the view, each at its chronological place.

        Superseded system messages are not restored (there is one system
        message). A summary whose every original is active again retires from
        the view.

        Returns:
            The messages that were restored, in record order.
        """
        self._writable()
        self._count()
        lo, hi, _ = slice(start, end).indices(len(self._record))
        active = set(self._active)
        pinned = self._pinned_index()
        restored: list[Message] = []
        for index in range(lo, hi):
            if index in active or (self._record[index].role == "system" and index != pinned):
                continue
            bisect.insort(self._active, index, key=self._key)
            active.add(index)
            self._active_tokens += self._tokens[index]
            restored.append(self._record[index])
        retired = [
            summary
            for summary, covered in self._summaries.items()
            if summary in active and all(i in active for i in covered)
        ]
        if retired:
            gone = set(retired)
            self._active = [i for i in self._active if i not in gone]
            self._active_tokens -= sum(self._tokens[i] for i in gone)
        return restored

    def replace(self, message_ids: Sequence[str], summary: Message) -> Message:
        """Replace messages in the view with one summary message at the first one's place.

        This is compaction: the originals leave the view and stay in the record.

        Raises:
            ValueError: nothing to replace, an id not in the view, the system
                message among them, or a summary with the system role.
        """
        self._writable()
        self._count()
        if summary.role == "system":
            raise ValueError("a summary cannot be a system message")
        if summary.id in self._index:
            raise ValueError(f"message id {summary.id!r} is already in the log")
        if not message_ids:
            raise ValueError("replace() needs at least one message to replace")
        indices = []
        for message_id in message_ids:
            if not self.is_active(message_id):
                raise ValueError(f"message {message_id!r} is not in the active view")
            indices.append(self._index[message_id])
        if self._pinned_index() in indices:
            raise ValueError("the system message cannot be compacted")
        covered = tuple(sorted(set(indices)))
        self._append_order = False
        gone = set(covered)
        self._active = [i for i in self._active if i not in gone]
        self._active_tokens -= sum(self._tokens[i] for i in covered)
        index = len(self._record)
        # The summary sits where the earliest replaced message sat, even when
        # that is an older summary whose record index is larger.
        self._add_record(summary, (*min(map(self._key, covered)), index))
        self._summaries[index] = covered
        bisect.insort(self._active, index, key=self._key)
        self._count()
        return summary

    def copy(self) -> MessageLog:
        """An independent log sharing the (immutable) messages, copied on first change."""
        clone = MessageLog.__new__(MessageLog)
        clone._record = self._record
        clone._keys = self._keys
        clone._tokens = self._tokens
        clone._counted = self._counted
        clone._active_tokens = self._active_tokens
        clone._active = self._active
        clone._index = self._index
        clone._summaries = self._summaries
        clone._append_order = self._append_order
        # Both sides copy before their next change; until then they share.
        clone._shared = self._shared = True
        return clone

    def with_replaced(self, entries: Mapping[int, Message]) -> MessageLog:
        """A copy of the log in which some record entries are other versions of themselves.

        Each key of `entries` is a record index, each value the message to
        hold there instead, with the id of the one it replaces (a shortened
        stub of it, say). Sort keys, the active view and the summaries stay
        as they are, and the other entries keep their token estimates: the
        copy costs the entries replaced, not the log's length (rebuilding
        from `state()` estimated every message again, a JSON dump of each
        call's arguments). This log is left unchanged.

        Raises:
            ValueError: an index outside the record, or a message whose id is
                not the id of the entry it would replace.
        """
        for index, message in entries.items():
            if not 0 <= index < len(self._record):
                raise ValueError(f"record index {index} is outside the log")
            if message.id != self._record[index].id:
                raise ValueError(
                    f"message {message.id!r} cannot replace {self._record[index].id!r}: "
                    "a replacement keeps the id of the entry it replaces"
                )
        clone = self.copy()
        clone._writable()
        clone._count()
        active = set(clone._active)
        for index, message in entries.items():
            tokens = _message_tokens(message)
            if message.role != clone._record[index].role:
                clone._append_order = False  # a system message where appending puts none
            if index in active:
                clone._active_tokens += tokens - clone._tokens[index]
            clone._record[index] = message
            clone._tokens[index] = tokens
        return clone

    def kept(self, record_indices: Iterable[int]) -> MessageLog:
        """A new log of these record entries, appended in this order.

        The same log as ``MessageLog(log.record[i] for i in record_indices)``,
        without estimating each message's tokens again.

        Raises:
            IndexError: an index outside the record.
            ValueError: as `append` (an entry twice, a second system message).
        """
        self._count()
        log = MessageLog()
        indices = []
        for index in record_indices:
            if index < 0:
                raise IndexError(f"record index {index} is outside the log")
            log.append(self._record[index])
            indices.append(index)
        log._tokens = [self._tokens[i] for i in indices]
        log._counted = len(indices)
        log._active_tokens = sum(map(log._tokens.__getitem__, log._active))
        return log

    def without(self, record_indices: Collection[int]) -> MessageLog:
        """A new log of the active view without these record entries, in view order.

        The same log as ``log.kept(i for i in view if i not in record_indices)``.
        For a log `in_append_order` (a served session's, compacted oldest
        first) only the entries up to the last one left out are visited;
        the rest of the record is copied as slices, so leaving out the
        oldest entries of a long log costs what is left out, not the log's
        length in Python steps (the lists and the id index are still copied).
        """
        if not self._append_order:
            drop = set(record_indices)
            return self.kept([i for i in self._active if i not in drop])
        self._count()
        n = len(self._record)
        drop = {i for i in record_indices if 0 <= i < n}
        cut = max(drop, default=-1) + 1
        front = [i for i in range(cut) if i not in drop]
        record = [self._record[i] for i in front] + self._record[cut:]
        tokens = [self._tokens[i] for i in front] + self._tokens[cut:]
        log = MessageLog.__new__(MessageLog)
        log._record = record
        log._tokens = tokens
        log._counted = len(tokens)
        # In append order the keys are (i,), but (-1, 0) for a system
        # message at 0, and the view is range(n): slices of both serve.
        log._keys = self._keys[: len(record)]
        if log._keys:
            log._keys[0] = (-1, 0) if record[0].role == "system" else (0,)
        elif record and record[0].role == "system":
            log._keys.append((-1, 0))
        log._active = self._active[: len(record)]
        log._index = dict(zip(map(_id_of, record), range(len(record)), strict=True))
        log._summaries = {}
        log._active_tokens = self._active_tokens - sum(self._tokens[i] for i in drop)
        log._shared = False
        log._append_order = True
        return log

    def state(
        self,
    ) -> tuple[list[Message], list[tuple[int, ...]], list[int], dict[int, tuple[int, ...]]]:
        """The log's internal state, for persistence: record, sort keys, view, summaries."""
        keys = self._keys.copy()
        keys.extend(zip(range(len(keys), len(self._record))))
        return (
            self._record.copy(),
            keys,
            self._active.copy(),
            dict(self._summaries),
        )

    @classmethod
    def from_state(
        cls,
        record: list[Message],
        keys: list[tuple[int, ...]],
        active: list[int],
        summaries: dict[int, tuple[int, ...]],
    ) -> MessageLog:
        """Rebuild a log from `state()`.

        Raises:
            ValueError: the parts are inconsistent (lengths, indices, order).
        """
        # Each step is one call into C (map, zip, sorted, list comparisons):
        # a load restores 10,000 messages, and per-message Python steps were
        # a third of what restoring them cost after their JSON was parsed.
        n = len(record)
        if len(keys) != n or (active and (min(active) < 0 or max(active) >= n)):
            raise ValueError("inconsistent message log state: keys or view out of range")
        log = cls.__new__(cls)
        log._record = list(record)
        # Estimated when first asked (`_count`), not for every restored message.
        log._tokens = []
        log._counted = 0
        log._active_tokens = 0
        log._shared = False
        first = _appended_first_key(keys, active, summaries)
        if first is not None:
            # What the steps below make of such a state, without a tuple per
            # key (all but the first dropped again) or sorting the view.
            index = dict(zip(map(_id_of, record), range(n), strict=True))
            if len(index) != n:
                raise ValueError("inconsistent message log state: duplicate message ids")
            if first == ((-1, 0) if record[0].role == "system" else (0,)) and "system" not in map(
                _role_of, itertools.islice(record, 1, None)
            ):
                log._keys = [first]
                log._index = index
                log._active = list(active)
                log._summaries = {}
                log._append_order = True
                return log
        log._keys = list(map(tuple, keys))
        log._index = dict(zip(map(_id_of, record), range(n), strict=True))
        if len(log._index) != n:
            raise ValueError("inconsistent message log state: duplicate message ids")
        log._active = sorted(set(active), key=log._keys.__getitem__)
        log._summaries = {int(k): tuple(v) for k, v in summaries.items()}
        log._append_order = (
            not log._summaries
            and log._active == list(range(n))
            and log._keys[1:] == list(zip(range(1, n)))
            and (not n or log._keys[0] == ((-1, 0) if record[0].role == "system" else (0,)))
            and "system" not in map(_role_of, itertools.islice(record, 1, None))
        )
        if log._append_order:
            # Every key after the first is the implied ``(i,)`` (see `_key`): dropped here,
            # they die now, not in the garbage collector's next pass over the load.
            del log._keys[1:]
        return log

    # -- internals -----------------------------------------------------------

    def _writable(self) -> None:
        """Own the containers before changing them (they may be shared with a copy)."""
        if self._shared:
            self._record = self._record.copy()
            self._keys = self._keys.copy()
            self._tokens = self._tokens.copy()
            self._active = self._active.copy()
            self._index = self._index.copy()
            self._summaries = self._summaries.copy()
            self._shared = False

    def _add_record(self, message: Message, key: tuple[int, ...] | None) -> int:
        """Add `message` to the record with sort `key`; None is the appended message's ``(i,)``."""
        if message.id in self._index:
            raise ValueError(f"message id {message.id!r} is already in the log")
        index = len(self._record)
        self._record.append(message)
        if key is not None:
            keys = self._keys
            keys.extend(zip(range(len(keys), index)))
            keys.append(key)
        self._index[message.id] = index
        return index

    def _count(self) -> None:
        """Estimate the entries appended since last asked and add them to the view's total.

        A copy shares `_tokens` with this log until either changes, and
        extends it here as this log does: an estimate depends on the message
        alone, and while the two share the list they share the record.
        """
        record = self._record
        n = len(record)
        start = self._counted
        if start == n:
            return
        tokens = self._tokens
        if len(tokens) < n:
            tokens.extend(map(_message_tokens, record[len(tokens) : n]))
        if start == 0:
            self._active_tokens = sum(map(tokens.__getitem__, self._active))
        else:
            self._active_tokens += sum(tokens[start:n])
        self._counted = n

    def _key(self, index: int) -> tuple[int, ...]:
        keys = self._keys
        return keys[index] if index < len(keys) else (index,)

    def _pinned_index(self) -> int | None:
        if self._active and self._record[self._active[0]].role == "system":
            return self._active[0]
        return None

    def _clamp(self, start: int, end: int | None) -> tuple[int, int]:
        lo, hi, _ = slice(start, end).indices(len(self._active))
        floor = 1 if self._pinned_index() is not None else 0
        return max(lo, floor), max(hi, floor)


# The chat model protocol the agent loop talks to.
#
# Any object with ``async def __call__(messages, tools) -> ModelReply`` is a
# chat model: a provider adapter, or the offline `ScriptedModel` and
# `FunctionModel` of `lionfactory.testing`. The loop passes `Tool` objects, not
# schemas, so an adapter exports them in its provider's style
# (``tool.schema("openai")``, ``"anthropic"``, ...).


def _text(value: str | None) -> str:
    # OpenAI-style adapters see ``content: null`` on a tool-call turn and pass
    # it on; the conversation record holds text, so "no text" is "".
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"ModelReply text must be a str or None, got {value!r:.200}")
    return value


def _tool_calls(value: Iterable[ToolCall] | None) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, ToolCall)) or not isinstance(value, Iterable):
        raise TypeError(f"tool_calls must be a sequence of ToolCall objects, got {value!r:.200}")
    return tuple_of(ToolCall, value, "tool_calls must hold ToolCall objects")


_Item = TypeVar("_Item")


def tuple_of(kind: type[_Item], value: Iterable[Any], refusal: str) -> tuple[_Item, ...]:
    """`value`'s items as a tuple, each checked to be a `kind`, for an attrs converter.

    Raises:
        TypeError: an item of another type: `refusal`, then the item.
    """
    items = tuple(value)
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(f"{refusal}, got {item!r:.200}")
    return items


@attrs.frozen
class ModelReply:
    """What a chat model answered: text, tool calls, or both.

    Both fields are checked here, at construction, so a malformed reply
    fails in the adapter that built it with a plain `TypeError` instead of
    deep inside the agent loop.

    Attributes:
        text: the assistant's text ("" when it only calls tools; None is
            accepted and stored as "").
        tool_calls: the calls it wants run, in order (None is stored as ()).
    """

    text: str = attrs.field(default="", converter=_text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: the active messages and the tools in, a `ModelReply` out."""

    async def __call__(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelReply:
        """Answer the conversation `messages`, optionally calling some of `tools`."""
        ...
