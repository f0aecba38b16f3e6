"""Offline fakes and assertions for testing agents and tool sets.

Product, not test scaffolding (like `trio.testing`): documented and tested.

* `ScriptedModel` plays a fixed list of replies and fails loudly when the
  script runs out; `FunctionModel` answers with a function you write.
* `tool_call()` builds a `ToolCall` for a script.
* `assert_manifest()` pins a branch's tool list with a readable diff.
* `assert_no_foreign_bindings()` proves no tool of a branch reaches another
  branch or its message log (the clone invariant: a clone's tools act on the
  clone, never on the branch it was cloned from).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from pydantic import BaseModel

from lionfactory._branch import Branch
from lionfactory._messages import Message, MessageLog, ModelReply, ToolCall
from lionfactory._tool import Tool
from lionfactory.errors import ScriptExhaustedError

__all__ = [
    "FunctionModel",
    "ModelCall",
    "ScriptedModel",
    "assert_manifest",
    "assert_no_foreign_bindings",
    "find_foreign_bindings",
    "tool_call",
]

ReplyLike = ModelReply | str | ToolCall | Mapping[str, Any] | Sequence[ToolCall | Mapping[str, Any]]
"""What a script entry may be: a ModelReply, text, one call, or several calls."""


def tool_call(name: str, /, **arguments: Any) -> ToolCall:
    """A `ToolCall` for a script: ``tool_call("reader", action="read", path="a.py")``."""
    return ToolCall(name=name, arguments=arguments)


def _as_call(item: ToolCall | Mapping[str, Any]) -> ToolCall:
    if isinstance(item, ToolCall):
        return item
    if isinstance(item, Mapping):
        data = dict(item)
        name = data.pop("tool", None) or data.pop("name", None)
        if not isinstance(name, str):
            raise TypeError(f"a scripted tool call needs a 'tool' name, got {item!r}")
        arguments = data.pop("arguments", {})
        extra = {"id": data.pop("id")} if "id" in data else {}
        if data:
            raise TypeError(f"unexpected keys {sorted(data)} in scripted tool call {item!r}")
        return ToolCall(name=name, arguments=dict(arguments), **extra)
    raise TypeError(f"a scripted tool call must be a ToolCall or a dict, got {item!r}")


def _as_reply(value: Any) -> ModelReply:
    """Normalise a script entry or a function's answer into a `ModelReply`."""
    if isinstance(value, ModelReply):
        return value
    if isinstance(value, str):
        return ModelReply(text=value)
    if isinstance(value, (ToolCall, Mapping)):
        return ModelReply(tool_calls=(_as_call(value),))
    if isinstance(value, Sequence):
        return ModelReply(tool_calls=tuple(_as_call(v) for v in value))
    raise TypeError(f"cannot turn {value!r} into a ModelReply")


@attrs.define(eq=False)
class ModelCall:
    """What a fake model was shown on one turn."""

    messages: list[Message]
    tools: list[Tool]

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered on that turn."""
        return [t.name for t in self.tools]


@attrs.define(eq=False, init=False)
class ScriptedModel:
    """A chat model that plays a fixed script of replies, in order.

    Each entry is text (a final answer), a `ToolCall` or
    ``{"tool": name, "arguments": {...}}`` (one call), a list of those
    (several calls in one reply), or a `ModelReply`.

    Attributes:
        calls: what the model was shown on each turn (`ModelCall`).

    Raises:
        ScriptExhaustedError: when asked for more replies than the script has.
    """

    replies: list[ModelReply]
    calls: list[ModelCall]

    def __init__(self, replies: Iterable[ReplyLike]) -> None:
        self.__attrs_init__(replies=[_as_reply(r) for r in replies], calls=[])

    @property
    def remaining(self) -> int:
        """How many replies are left."""
        return len(self.replies) - len(self.calls)

    async def __call__(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelReply:
        """Return the next scripted reply."""
        turn = len(self.calls)
        self.calls.append(ModelCall(list(messages), list(tools)))
        if turn >= len(self.replies):
            last = messages[-1].content[:300] if messages else ""
            raise ScriptExhaustedError(
                f"ScriptedModel has {len(self.replies)} replies and was asked for reply "
                f"{turn + 1}; the last message it saw was: {last!r}"
            )
        return self.replies[turn]


@attrs.define(eq=False)
class FunctionModel:
    """A chat model that answers with ``fn(messages, tools)`` (sync or async).

    `fn` may return anything a `ScriptedModel` entry may be.
    """

    fn: Callable[[list[Message], list[Tool]], Any | Awaitable[Any]]
    calls: list[ModelCall] = attrs.field(factory=list)

    async def __call__(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelReply:
        """Call the function and normalise its answer."""
        shown = ModelCall(list(messages), list(tools))
        self.calls.append(shown)
        out = self.fn(shown.messages, shown.tools)
        if inspect.isawaitable(out):
            out = await out
        return _as_reply(out)


def assert_manifest(
    branch: Branch,
    expected: Sequence[Mapping[str, Any]] | Sequence[str],
    *,
    keys: Sequence[str] = ("name", "factory", "bound_to"),
) -> None:
    """Pin a branch's tool list in a test, with a readable diff on mismatch.

    Args:
        branch: the branch to check.
        expected: tool names, or manifest entries restricted to `keys`.
        keys: the manifest keys compared when `expected` holds entries.

    Raises:
        AssertionError: with a unified diff of expected against actual.
    """
    manifest = branch.manifest()
    if all(isinstance(e, str) for e in expected):
        actual: list[Any] = [entry["name"] for entry in manifest]
        wanted: list[Any] = list(expected)
    else:
        actual = [{k: entry[k] for k in keys} for entry in manifest]
        wanted = [{k: dict(e)[k] for k in keys} for e in expected]  # type: ignore[arg-type]
    if actual != wanted:
        a = json.dumps(wanted, indent=2, sort_keys=True).splitlines()
        b = json.dumps(actual, indent=2, sort_keys=True).splitlines()
        diff = "\n".join(difflib.unified_diff(a, b, "expected", "actual", lineterm=""))
        raise AssertionError(f"tool manifest of {branch!r} differs:\n{diff}")


# Objects the walk never enters: plain data, and things that are shared by
# design (classes, modules, code) rather than state a factory captured.
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), Message, ToolCall)
_SKIP = (type, types.ModuleType, types.CodeType, types.FrameType, types.BuiltinFunctionType)


def _children(obj: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(obj, Mapping):
        for key, value in list(obj.items()):
            yield f"[{key!r}]", value
            if not isinstance(key, _LEAVES):
                yield "<key>", key
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(list(obj)):
            yield f"[{i}]", value
        return
    if isinstance(obj, functools.partial):
        yield ".func", obj.func
        yield ".args", obj.args
        yield ".keywords", obj.keywords
        return
    if isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
        return
    if isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=False):
            try:
                yield f".<closure {name}>", cell.cell_contents
            except ValueError:  # an empty cell
                continue
        if obj.__defaults__:
            yield ".__defaults__", obj.__defaults__
        if obj.__kwdefaults__:
            yield ".__kwdefaults__", obj.__kwdefaults__
        wrapped = obj.__dict__.get("__wrapped__")
        if wrapped is not None:
            yield ".__wrapped__", wrapped
        return
    if attrs.has(type(obj)):
        for field in attrs.fields(type(obj)):
            yield f".{field.name}", getattr(obj, field.name, None)
    elif isinstance(obj, BaseModel):
        for name, value in obj.__dict__.items():
            yield f".{name}", value
    else:
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and hasattr(obj, slot):
                    yield f".{slot}", getattr(obj, slot)
        if hasattr(obj, "__dict__") and not isinstance(obj, _SKIP):
            yield from ((f".{k}", v) for k, v in vars(obj).items())


def find_foreign_bindings(branch: Branch, *, limit: int = 200_000) -> list[str]:
    """Paths from `branch`'s tools to any other Branch or another branch's MessageLog.

    Walks every registered tool's handler and hooks: closures, bound methods,
    partials, attrs and pydantic fields, instance dicts and slots, and
    containers. Classes, modules and function globals are not entered.
    """
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = []
    for name, tool in branch.tools.items():
        for attribute in ("handler", "pre", "post", "on_error"):
            stack.append((f"tools[{name!r}].{attribute}", getattr(tool, attribute)))
    visited = 0
    while stack and visited < limit:
        path, obj = stack.pop()
        if isinstance(obj, (*_LEAVES, *_SKIP)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, Branch):
            if obj is not branch:
                found.append(f"{path} -> {obj!r}")
            continue
        if isinstance(obj, MessageLog):
            if obj is not branch.messages:
                found.append(f"{path} -> a MessageLog that is not this branch's")
            continue
        stack.extend((path + child, value) for child, value in _children(obj))
    return found


def assert_no_foreign_bindings(branch: Branch) -> None:
    """Fail if any tool of `branch` can reach a different Branch or its message log.

    Raises:
        AssertionError: listing each path that reaches a foreign object.
    """
    found = find_foreign_bindings(branch)
    if found:
        listing = "\n".join(f"  {p}" for p in found[:20])
        raise AssertionError(f"tools of {branch!r} reach other branches:\n{listing}")
