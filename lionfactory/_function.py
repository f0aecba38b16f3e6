"""`function_tool()`: a Tool from a plain function's signature.

The request model is built by pydantic from the signature, so the schema the
model reads and the validation it meets come from one source: unions and
``X | None`` work, postponed annotations (``from __future__ import
annotations``) are resolved, only parameters without defaults are required,
and Google-style ``Args:`` entries become parameter descriptions. The whole
docstring is the tool's description: a model that sees only the first line
never learns what the arguments mean.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field, create_model

from lionfactory._tool import Tool

__all__ = ["function_tool"]

_ARGS_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^(\s*)(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")


def _arg_descriptions(doc: str) -> dict[str, str]:
    """Parse the ``Args:`` section of a Google-style docstring into name -> text."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    in_args = False
    section_indent = 0
    arg_indent: int | None = None
    current: str | None = None
    for line in lines:
        header = _ARGS_HEADER.match(line)
        if header:
            in_args, section_indent, arg_indent, current = True, len(header.group(1)), None, None
            continue
        if not in_args:
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= section_indent and _SECTION.match(line):
            in_args = False
            continue
        if indent <= section_indent:
            in_args = False
            continue
        match = _ARG_LINE.match(line)
        if match and (arg_indent is None or indent == arg_indent):
            arg_indent = indent
            current = match.group(2).lstrip("*")
            found[current] = match.group(4).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


# Names a pydantic field cannot take without shadowing BaseModel's API; such
# parameters get an internal name and keep their real name as the alias, so
# the schema and validation still use the function's own name.
_RESERVED = frozenset(dir(BaseModel)) | {"model_config"}


@attrs.frozen
class _FunctionHandler:
    """Calls the wrapped function with a validated request (a readable repr for debugging)."""

    fn: Callable[..., Any]
    fields: tuple[tuple[str, str, inspect._ParameterKind], ...]  # (field, parameter, kind)
    is_async: bool

    async def __call__(self, request: BaseModel) -> Any:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for field, parameter, kind in self.fields:
            value = getattr(request, field)
            if kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[parameter] = value
        if self.is_async:
            return await self.fn(*args, **kwargs)
        # A sync function may block (files, CPU); never run it on the event loop.
        return await anyio.to_thread.run_sync(functools.partial(self.fn, *args, **kwargs))


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool:
    """Make a Tool from a plain sync or async function.

    Args:
        fn: the function. ``*args``/``**kwargs`` are not supported: a model
            can only send named arguments the schema describes.
        name: the tool name (default: the function's ``__name__``).
        description: the description (default: the whole docstring).

    Returns:
        A `Tool` whose request model mirrors the signature. A sync function
        runs in a worker thread; the return value becomes the result (a dict
        or pydantic model as it is, anything else as ``{"result": value}``).

    Raises:
        TypeError: `fn` is not callable, takes ``*args``/``**kwargs``, or a
            parameter name starts with an underscore.
    """
    if not callable(fn):
        raise TypeError(f"function_tool() needs a callable, got {fn!r}")
    target = inspect.unwrap(fn)
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise TypeError(f"cannot resolve the annotations of {fn!r}: {exc}") from exc
    doc = inspect.getdoc(fn) or ""
    arg_docs = _arg_descriptions(doc)
    field_defs: dict[str, Any] = {}
    fields: list[tuple[str, str, inspect._ParameterKind]] = []
    for param in signature.parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(
                f"function_tool() cannot describe *{param.name} of {fn!r} to a model; "
                f"give every argument a name"
            )
        if param.name.startswith("_"):
            raise TypeError(
                f"parameter {param.name!r} of {fn!r} starts with an underscore, which a "
                f"model-facing schema cannot carry; rename it"
            )
        annotation = hints.get(param.name, Any)
        field_name = f"p_{param.name}" if param.name in _RESERVED else param.name
        info = Field(
            default=... if param.default is inspect.Parameter.empty else param.default,
            description=arg_docs.get(param.name),
            alias=param.name if field_name != param.name else None,
        )
        field_defs[field_name] = (annotation, info)
        fields.append((field_name, param.name, param.kind))
    tool_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    model_name = "".join(part.title() for part in re.split(r"[^A-Za-z0-9]", tool_name)) or "Tool"
    request_model = create_model(
        f"{model_name}Request",
        __config__=ConfigDict(extra="forbid", populate_by_name=True, arbitrary_types_allowed=True),
        __module__=getattr(target, "__module__", __name__),
        **field_defs,
    )
    handler = _FunctionHandler(
        fn=fn,
        fields=tuple(fields),
        # An object with an async __call__ is async too.
        is_async=inspect.iscoroutinefunction(target)
        or inspect.iscoroutinefunction(type(fn).__call__),
    )
    return Tool(
        name=tool_name,
        description=description if description is not None else doc,
        request_model=request_model,
        handler=handler,
    )
