"""Pydantic request models from the JSON schemas MCP servers publish.

A small, honest converter for the subset tool schemas use in practice: an
object whose properties are strings, integers, numbers, booleans, arrays,
objects, enums and consts, nullable types (``["string", "null"]`` or an
``anyOf`` with ``null``), required and optional properties, defaults and
descriptions. Anything else (``$ref``, ``oneOf``, ``allOf``, ``not``,
conditionals) becomes ``Any`` and is left for the server to check.

The model validates locally what it understands, so a model gets a
`ToolInputError` without a round trip; its *JSON schema*, the one the model
reads, is the server's own (`RemoteRequest.model_json_schema`), so nothing
the converter cannot express is lost from the prompt. ``extra="forbid"`` only
when the schema says ``additionalProperties: false``; otherwise unknown
arguments pass through to the server.
"""

from __future__ import annotations

import copy
import keyword
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = ["RemoteRequest", "annotation_for", "request_model"]

_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    # int first: a whole number stays an int on its way to the server.
    "number": int | float,
    "boolean": bool,
    "null": type(None),
}


class RemoteRequest(BaseModel):
    """Base of the request models built from a server's input schema."""

    model_config = ConfigDict(defer_build=True, extra="allow", protected_namespaces=())
    remote_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The server's own input schema (a copy), not one regenerated from the fields."""
        return copy.deepcopy(cls.remote_schema)

    def arguments(self) -> dict[str, Any]:
        """The arguments to send: what the caller gave, under the server's names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class _ClosedRemoteRequest(RemoteRequest):
    model_config = ConfigDict(defer_build=True, extra="forbid", protected_namespaces=())


def _union(options: list[Any]) -> Any:
    unique = list(dict.fromkeys(options))
    if len(unique) == 1:
        return unique[0]
    return Union[tuple(unique)]  # noqa: UP007 - a Union built at run time from a list


def annotation_for(schema: Any) -> Any:
    """The Python annotation for one property schema (``Any`` when unsure)."""
    if not isinstance(schema, Mapping):
        return Any
    if "const" in schema:
        return _literal([schema["const"]])
    if "enum" in schema:
        return _literal(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        options = [annotation_for({**schema, "type": k}) for k in kind]
        return Any if Any in options else _union(options)
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return list[annotation_for(schema.get("items", {}))]  # type: ignore[misc]
    if kind == "object":
        return dict[str, Any]
    any_of = schema.get("anyOf")
    if kind is None and isinstance(any_of, list) and any_of:
        options = [annotation_for(option) for option in any_of]
        return Any if Any in options else _union(options)
    return Any


def _literal(values: Any) -> Any:
    if not isinstance(values, list) or not values:
        return Any
    if not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
        return Any
    return Literal[tuple(values)]


def _python_name(name: str, index: int, taken: set[str]) -> str:
    """A safe attribute name for a property (the property name is kept as the alias)."""
    usable = (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("_")
        and not hasattr(RemoteRequest, name)
    )
    candidate = name if usable else f"field_{index}"
    while candidate in taken:
        candidate += "_"
    taken.add(candidate)
    return candidate


def request_model(model_name: str, schema: Mapping[str, Any]) -> type[RemoteRequest]:
    """Build a request model for a tool from its JSON input schema.

    Args:
        model_name: the class name to give the model.
        schema: the tool's ``inputSchema`` (an object schema).

    Returns:
        A `RemoteRequest` subclass; ``model_json_schema()`` returns `schema`.
    """
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    fields: dict[str, Any] = {}
    taken: set[str] = set()
    for index, (name, prop) in enumerate(properties.items()):
        annotation = annotation_for(prop)
        description = prop.get("description") if isinstance(prop, Mapping) else None
        if name in required:
            default: Any = ...
        elif isinstance(prop, Mapping) and "default" in prop:
            default = prop["default"]
        else:
            # Never sent (arguments() drops unset fields): the server applies its own default.
            default = None
        field = Field(default, alias=name, description=description)
        fields[_python_name(name, index, taken)] = (annotation, field)
    base = _ClosedRemoteRequest if schema.get("additionalProperties") is False else RemoteRequest
    model = cast("type[RemoteRequest]", create_model(model_name, __base__=base, **fields))
    model.remote_schema = copy.deepcopy(dict(schema))
    return model
