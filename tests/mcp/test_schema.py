"""Request models built from MCP input schemas."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lionfactory.mcp._schema import request_model
from lionfactory.tools.reader import ReaderRequest


def model(properties: dict[str, Any], **extra: Any) -> Any:
    return request_model("M", {"type": "object", "properties": properties, **extra})


@pytest.mark.parametrize(
    ("prop", "good", "bad"),
    [
        ({"type": "string"}, "x", 1),
        ({"type": "integer"}, 3, "three"),
        ({"type": "number"}, 2.5, "many"),
        ({"type": "boolean"}, True, "maybe"),
        ({"type": "array", "items": {"type": "string"}}, ["a"], [1]),
        ({"type": "object"}, {"k": 1}, [1]),
        ({"enum": ["a", "b"]}, "a", "c"),
        ({"const": 7}, 7, 8),
        ({"type": ["string", "null"]}, None, 1),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, "x"),
    ],
)
def test_the_common_subset_is_validated(prop: dict[str, Any], good: Any, bad: Any) -> None:
    m = model({"v": prop}, required=["v"])
    assert m.model_validate({"v": good}).arguments() == {"v": good}
    with pytest.raises(ValidationError):
        m.model_validate({"v": bad})


def test_a_whole_number_stays_an_integer() -> None:
    assert model({"n": {"type": "number"}}).model_validate({"n": 2}).arguments() == {"n": 2}


def test_anything_else_is_left_to_the_server() -> None:
    m = model({"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "r": {"$ref": "#/x"}})
    assert m.model_validate({"v": [1], "r": {"a": 1}}).arguments() == {"v": [1], "r": {"a": 1}}


def test_required_fields_are_required_and_optional_ones_are_not_sent() -> None:
    m = model(
        {"a": {"type": "string"}, "b": {"type": "integer", "default": 5}, "c": {"type": "string"}},
        required=["a"],
    )
    with pytest.raises(ValidationError, match="Field required"):
        m.model_validate({})
    request = m.model_validate({"a": "x"})
    assert request.b == 5
    assert request.arguments() == {"a": "x"}


def test_an_optional_field_given_null_is_refused_unless_nullable() -> None:
    m = model({"a": {"type": "string"}})
    with pytest.raises(ValidationError):
        m.model_validate({"a": None})


def test_extra_arguments_pass_unless_additional_properties_is_false() -> None:
    open_model = model({"a": {"type": "string"}})
    assert open_model.model_validate({"z": 1}).arguments() == {"z": 1}
    closed = model({"a": {"type": "string"}}, additionalProperties=False)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        closed.model_validate({"z": 1})


def test_unsafe_property_names_keep_their_names_on_the_wire() -> None:
    names = ["class", "x-y", "model_config", "_private", "arguments", "schema"]
    m = model({name: {"type": "string"} for name in names})
    request = m.model_validate(dict.fromkeys(names, "v"))
    assert request.arguments() == dict.fromkeys(names, "v")


def test_the_json_schema_is_the_servers_own() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"oneOf": [{"type": "string"}], "description": "kept as sent"}},
        "required": ["v"],
        "additionalProperties": False,
    }
    m = request_model("M", schema)
    assert m.model_json_schema() == schema
    m.model_json_schema()["properties"].clear()  # callers get a copy
    assert m.model_json_schema() == schema


def test_descriptions_reach_the_fields() -> None:
    m = model({"path": {"type": "string", "description": "Where to look."}})
    assert m.model_fields["path"].description == "Where to look."


def test_a_lionfactory_schema_round_trips() -> None:
    m = request_model("Reader", ReaderRequest.model_json_schema())
    arguments = {"action": "read", "path": "a.py", "limit": 3, "file_types": None}
    assert m.model_validate(arguments).arguments() == arguments
    with pytest.raises(ValidationError, match="action"):
        m.model_validate({"action": "reed", "path": "a.py"})
