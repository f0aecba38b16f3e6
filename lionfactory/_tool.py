"""The `Tool` record, its schema export and the call pipeline.

A Tool is an immutable description of something a model may call: a name, a
description, a pydantic request model and an async handler, plus hook tuples.
It is never mutated; `with_hooks()` returns a new one. Built-in tools come
from plain factory functions (see `lionfactory.tools`); `function_tool()`
makes one from an ordinary function (at the end of this module).
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal
from uuid import UUID

import anyio.to_thread
import attrs
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from lionfactory._approvals import approval_for, hook_name, without_approval
from lionfactory._echo import ECHO_LIMIT, echo, shorten
from lionfactory.errors import ApprovalRequired, ToolDenied, ToolError, ToolInputError

__all__ = [
    "ErrorHook",
    "PostHook",
    "PreHook",
    "SchemaStyle",
    "Tool",
    "ToolHints",
    "function_tool",
    "input_error",
    "reports_failure",
    "run_pre_hooks",
    "stated_targets",
    "to_result",
]

SchemaStyle = Literal["openai", "anthropic", "mcp"]

PreHook = Callable[
    [str, dict[str, Any]],
    "dict[str, Any] | Awaitable[dict[str, Any] | None] | None",
]
"""`hook(tool_name, arguments) -> dict | None`: a dict replaces the arguments.

Raise `ToolDenied(reason)` to refuse the call, `ApprovalRequired(reason)` to ask a
person first (a branch holds the call as a `PendingCall`)."""

PostHook = Callable[
    [str, dict[str, Any], dict[str, Any]],
    "dict[str, Any] | Awaitable[dict[str, Any] | None] | None",
]
"""`hook(tool_name, arguments, result) -> dict | None`: a dict replaces the result."""

ErrorHook = Callable[
    [str, dict[str, Any], BaseException],
    "dict[str, Any] | Awaitable[dict[str, Any] | None] | None",
]
"""`hook(tool_name, arguments, exc) -> dict | None`: the first dict becomes the result."""

# The common denominator of the providers' rules for function names
# (OpenAI allows exactly this set, at most 64 characters).
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _check_name(_instance: Any, _attribute: Any, value: str) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"a tool name must be 1-64 characters of [A-Za-z0-9_-], got {value!r}")


def _check_request_model(_instance: Any, _attribute: Any, value: Any) -> None:
    if not (isinstance(value, type) and issubclass(value, BaseModel)):
        raise TypeError(f"request_model must be a pydantic model class, got {value!r}")


def _check_callable(_instance: Any, attribute: Any, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"{attribute.name} must be callable, got {value!r}")


def _check_response_model(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and not (isinstance(value, type) and issubclass(value, BaseModel)):
        raise TypeError(f"response_model must be a pydantic model class or None, got {value!r}")


def _check_failed(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{_attribute.name} must be callable or None, got {value!r}")


def _check_hooks(_instance: Any, attribute: Any, value: tuple[Any, ...]) -> None:
    for hook in value:
        if not callable(hook):
            raise TypeError(f"every {attribute.name} hook must be callable, got {hook!r}")


def _as_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated `title` keys: noise in a prompt, never meaning.

    Only schema objects lose their title; a *property* called "title" inside a
    `properties` mapping is a name, not a title, and stays.
    """
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
            value, dict
        ):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


@functools.lru_cache(maxsize=512)
def _parameters(model: type[BaseModel]) -> dict[str, Any]:
    # Cached per class: run() sends the schemas on every turn. Callers get a
    # deep copy so nobody can edit the cached one.
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    return schema  # type: ignore[no-any-return]


def _short(value: Any, limit: int = ECHO_LIMIT) -> Any:
    """A value a model can read in an error message: numbers as they are, the rest cut."""
    if isinstance(value, (float, bool)) or value is None:
        return value
    if isinstance(value, int):
        # A 5,000-digit integer cannot even be printed: show its size instead.
        return value if value.bit_length() <= 64 else f"<an integer of {value.bit_length()} bits>"
    return echo(value, limit) if not isinstance(value, str) else shorten(value, limit)


def input_error(tool: str, exc: ValidationError) -> ToolInputError:
    """Translate pydantic's `ValidationError` into a `ToolInputError` a model can act on."""
    errors = [
        {
            "loc": [shorten(str(part), 100) for part in err["loc"]],
            "msg": err["msg"],
            "type": err["type"],
            "input": _short(err.get("input")),
        }
        for err in exc.errors(include_url=False)
    ]
    lines = [f"Invalid arguments for tool {tool!r}:"]
    for err in errors:
        where = ".".join(err["loc"]) or "(arguments)"
        lines.append(f"- {where}: {err['msg']} (got {err['input']!r})")
    lines.append("Fix these arguments and call the tool again.")
    return ToolInputError(tool, "\n".join(lines), errors)


def to_result(value: Any) -> dict[str, Any]:
    """Turn a handler's return value into the JSON-ready dict a call returns."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return value
    return {"result": pydantic_core.to_jsonable_python(value, fallback=repr)}


def reports_failure(result: Any) -> bool:
    """The default rule for whether a JSON-ready response reports a typed failure.

    `Tool.reports_failure` asks a tool's own predicate or response model
    first; this rule answers for tools that state neither, and for a result
    whose tool is not at hand. Responses state failure in one of three
    common ways: ``success`` False; a ``status`` of ``"error"`` or
    ``"unavailable"``; or, for a command, a non-zero or missing
    ``return_code``, ``timed_out``, or an ``error`` (a refused command never
    ran). Anything else, including a value that is not a mapping (a custom
    tool's plain result), is a success.
    """
    # The exact type first: a response is a dict, and the ABC check costs more than the rule.
    if type(result) is not dict and not isinstance(result, Mapping):
        return False
    if result.get("success") is False:
        return True
    if result.get("status") in ("error", "unavailable"):
        return True
    if "return_code" in result:
        return result["return_code"] != 0 or bool(result.get("timed_out") or result.get("error"))
    return bool(result.get("timed_out"))


@attrs.frozen
class ToolHints:
    """What a tool says about its own behaviour, for hosts that decide what to ask a person.

    Set by the factory that builds the tool (a transport translates them, for
    example into MCP's ``annotations``, and keeps no table of its own). Where
    a tool offers actions of different kinds, its hints describe the strongest
    one (the editor's ``write`` overwrites, so the editor is destructive).

    Attributes:
        title: a short human-readable name (clients show it in menus).
        read_only: the tool never changes its environment.
        destructive: a call may overwrite or delete (meaningful when not read-only).
        idempotent: repeating a call with the same arguments has no further effect.
        open_world: a call may reach things outside the workspace (a command,
            a model, a remote host).
    """

    title: str = attrs.field(validator=attrs.validators.instance_of(str))
    read_only: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    destructive: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    idempotent: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    open_world: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @classmethod
    def reading(cls, title: str, *, open_world: bool = False) -> ToolHints:
        """The hints of a tool that only reads: read-only and idempotent."""
        return cls(title, read_only=True, idempotent=True, open_world=open_world)


async def _run_hook(hook: Callable[..., Any], *args: Any) -> Any:
    out = hook(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


async def run_pre_hooks(
    hooks: Iterable[PreHook],
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    kind: str = "pre",
    on_ask: Callable[[ApprovalRequired, PreHook], bool] | None = None,
) -> dict[str, Any]:
    """Run pre hooks in order, each on the arguments the one before it produced.

    The one place the pre-hook contract is enforced (`Tool.invoke` and the
    coding toolkit's security re-check both run hooks through it): a hook
    returns None (keep the arguments) or a mapping (the new arguments).

    Args:
        hooks: the hooks, called as ``hook(tool_name, arguments)``, sync or async.
        tool_name: the tool the call is for.
        arguments: the call's arguments (not mutated).
        kind: how the error message names the hooks (``"pre"``, ``"security"``).
        on_ask: called when a hook raises `ApprovalRequired`; True skips that
            hook (the ask is answered), False re-raises. Without it, the
            exception propagates.

    Returns:
        The final arguments, as a new dict.

    Raises:
        TypeError: a hook returned something other than a mapping or None.
    """
    args = dict(arguments)
    for hook in hooks:
        try:
            replaced = await _run_hook(hook, tool_name, args)
        except ApprovalRequired as exc:
            if on_ask is not None and on_ask(exc, hook):
                continue
            raise
        if replaced is not None:
            if not isinstance(replaced, Mapping):
                raise TypeError(
                    f"{kind} hook {hook!r} of tool {tool_name!r} must return a dict "
                    f"or None, got {type(replaced).__name__}"
                )
            args = dict(replaced)
    return args


def stated_targets(tool_name: str, arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """For a pre hook: the targets the tool now running its hooks states for `arguments`.

    A hook receives only ``(tool_name, arguments)``; this asks the tool
    whose pipeline is running it (`Tool.targets_of`), so a policy judges
    the paths the tool will resolve, not the text the model typed. None
    outside a tool's pipeline, for another tool's name, or when the tool
    states no targets.
    """
    tool = _INVOKING.get()
    if tool is None or tool.name != tool_name:
        return None
    return tool.targets_of(arguments)


@attrs.frozen
class Tool:
    """An immutable description of a callable tool.

    Attributes:
        name: what the model calls it (1-64 characters of ``[A-Za-z0-9_-]``).
        description: the whole text the model reads about the tool.
        request_model: a pydantic model class; its JSON schema is the
            parameters schema and it validates every call.
        handler: ``async handler(request) -> BaseModel | dict``. Expected
            operational failures are returned, not raised.
        pre: hooks run before validation, in order (`PreHook`).
        post: hooks run on the result, in order (`PostHook`).
        on_error: hooks offered an unexpected handler exception (`ErrorHook`).
        bound_to: the id of the branch a factory closed over, or None for a
            tool that is safe to share between branches.
        response_model: the pydantic model of the handler's response, when
            it has one (MCP serves its JSON schema as ``outputSchema``).
        hints: what the tool says about its behaviour (`ToolHints`), or None.
        targets: ``targets(request) -> paths``: every workspace path a call
            with this validated request reads, writes, moves or deletes,
            each resolved by the tool's own workspace into one canonical
            root-relative POSIX form (``src/a.py``); paths the tool would
            refuse are left out. Policies that judge paths (permission
            rules) read these instead of the raw arguments, so a spelling
            (``../root/src/a.py``, ``//``) or a second argument (each file
            of a patch, both ends of a move) cannot get past them. None: the
            tool states none.
        failed: ``failed(result) -> bool``, whether a JSON-ready response
            reports a failure; None asks the response model's own
            ``reports_failure`` classmethod, else the default rule
            (`reports_failure`). `Tool.reports_failure` is the one question.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    request_model: type[BaseModel] = attrs.field(validator=_check_request_model, repr=False)
    handler: Callable[[Any], Awaitable[Any]] = attrs.field(validator=_check_callable, repr=False)
    pre: tuple[PreHook, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_check_hooks, repr=False
    )
    post: tuple[PostHook, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_check_hooks, repr=False
    )
    on_error: tuple[ErrorHook, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_check_hooks, repr=False
    )
    bound_to: UUID | None = None
    response_model: type[BaseModel] | None = attrs.field(
        default=None, validator=_check_response_model, repr=False
    )
    hints: ToolHints | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(ToolHints)),
        repr=False,
    )
    failed: Callable[[Any], bool] | None = attrs.field(
        default=None, validator=_check_failed, repr=False
    )
    targets: Callable[[Any], Sequence[str]] | None = attrs.field(
        default=None, validator=_check_failed, repr=False
    )

    def targets_of(self, arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The workspace paths a call with `arguments` would touch, in the tool's own account.

        None when the tool states no targets, or when the arguments do not
        validate (the call then fails validation and touches nothing).
        """
        if self.targets is None:
            return None
        try:
            request = self.request_model.model_validate(arguments)
        except ValidationError:
            return None
        return tuple(self.targets(request))

    def reports_failure(self, result: Any) -> bool:
        """Whether `result`, a JSON-ready response of this tool, reports a typed failure.

        The one answer the command line (exit status), the MCP server
        (``isError``) and the toolkit's nudges (failure streaks) ask for: the
        tool's own `failed` predicate, else its response model's
        ``reports_failure`` classmethod, else the default rule
        (`lionfactory.reports_failure`).
        """
        if self.failed is not None:
            return bool(self.failed(result))
        judge = getattr(self.response_model, "reports_failure", None)
        if judge is not None and isinstance(result, Mapping):
            return bool(judge(result))
        return reports_failure(result)

    def schema(self, style: SchemaStyle = "openai") -> dict[str, Any]:
        """Return the tool's schema in a provider's format.

        Args:
            style: ``"openai"`` (``{"type": "function", "function": {...}}``),
                ``"anthropic"`` (``name``, ``description``, ``input_schema``)
                or ``"mcp"`` (``name``, ``description``, ``inputSchema``).

        Raises:
            ValueError: for an unknown style.
        """
        parameters = copy.deepcopy(_parameters(self.request_model))
        if style == "openai":
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": parameters,
                },
            }
        if style == "anthropic":
            return {"name": self.name, "description": self.description, "input_schema": parameters}
        if style == "mcp":
            return {"name": self.name, "description": self.description, "inputSchema": parameters}
        raise ValueError(f"style must be 'openai', 'anthropic' or 'mcp', got {style!r}")

    def with_hooks(
        self,
        *,
        pre: Iterable[PreHook] = (),
        post: Iterable[PostHook] = (),
        on_error: Iterable[ErrorHook] = (),
    ) -> Tool:
        """Return a new Tool with these hooks appended after the existing ones."""
        return attrs.evolve(
            self,
            pre=self.pre + tuple(pre),
            post=self.post + tuple(post),
            on_error=self.on_error + tuple(on_error),
        )

    async def invoke(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run the call pipeline on a mapping of arguments (see `__call__`)."""
        # Read once, before any hook rewrites the arguments: the approval
        # names the call as the person saw it.
        approved = approval_for(self.name, arguments)

        def on_ask(exc: ApprovalRequired, hook: PreHook) -> bool:
            if approved:
                # A person approved this very call (these arguments):
                # the ask is answered; the next hooks still judge it.
                return True
            exc.tool = exc.tool or self.name
            exc.hook = exc.hook or hook_name(hook)
            exc.arguments = dict(arguments)
            return False

        token = _INVOKING.set(self)
        try:
            args = await run_pre_hooks(self.pre, self.name, arguments, on_ask=on_ask)
        except ToolDenied as exc:
            exc.tool = exc.tool or self.name
            raise
        finally:
            _INVOKING.reset(token)
        try:
            request = self.request_model.model_validate(args)
        except ValidationError as exc:
            raise input_error(self.name, exc) from None
        try:
            # The approval answered this call's asks, not those of what the
            # handler does next: a sub-agent's steps, a nested call.
            with without_approval():
                result = to_result(await self.handler(request))
        except (ToolError, ApprovalRequired):
            # Model-facing errors raised deliberately by a handler (a nested
            # denial, say) are already in the form Branch.act reports; an ask
            # from inside the handler holds the call like a hook's.
            raise
        except Exception as exc:
            for on_error in self.on_error:
                handled = await _run_hook(on_error, self.name, args, exc)
                if handled is not None:
                    return to_result(handled)
            raise
        for post in self.post:
            rewritten = await _run_hook(post, self.name, args, result)
            if rewritten is not None:
                result = to_result(rewritten)
        return result

    async def __call__(self, /, **arguments: Any) -> dict[str, Any]:
        """Call the tool: pre hooks, validation, handler, post hooks.

        Returns:
            The JSON-ready response (``response.model_dump(mode="json")``).

        Raises:
            ToolDenied: a pre hook refused the call.
            ApprovalRequired: a pre hook asks a person first (a branch holds
                the call as pending instead).
            ToolInputError: the arguments failed validation.
            Exception: an unexpected handler exception no on_error hook handled.
        """
        return await self.invoke(arguments)

    def run_sync(self, /, **arguments: Any) -> dict[str, Any]:
        """Call the tool from synchronous code (a script, a plain notebook cell), on trio.

        Raises:
            RuntimeError: when called from inside a running event loop; use
                ``await tool(...)`` there.
        """
        import trio

        library = running_event_loop()
        if library is not None:
            raise RuntimeError(
                f"run_sync() cannot run inside a running {library} event loop; "
                f"use `await tool(...)` instead"
            )
        return trio.run(functools.partial(self.invoke, arguments))


def running_event_loop() -> str | None:
    """The async library running in this thread (``"trio"``, ``"asyncio"``), or None.

    A synchronous entry point (`Tool.run_sync`, an adapter's sync call) starts
    its own trio loop, which cannot nest inside a running one; it asks this
    first so the caller learns to ``await`` instead of meeting trio's error.
    """
    import sniffio  # anyio's own dependency; imported here to keep import time low

    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None


# The tool whose pre hooks are running, for `stated_targets`.
_INVOKING: contextvars.ContextVar[Tool | None] = contextvars.ContextVar(
    "lionfactory_invoking_tool", default=None
)
# `function_tool()`: a Tool from a plain function's signature.
#
# The request model is built by pydantic from the signature, so the schema the
# model reads and the validation it meets come from one source: unions and
# ``X | None`` work, postponed annotations (``from __future__ import
# annotations``) are resolved, only parameters without defaults are required,
# and Google-style ``Args:`` entries become parameter descriptions. The whole
# docstring is the tool's description: a model that sees only the first line
# never learns what the arguments mean.

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
