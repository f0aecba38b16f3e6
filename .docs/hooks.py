"""mkdocs hooks: schema tables from the pydantic models, and included files.

A page line ``<!-- schema: lionfactory.tools.ReaderRequest -->`` becomes a
table of the model's fields (name, type, default, description) followed by
its whole JSON Schema in a collapsed block, both generated from the model at
build time, so a page can never describe a field the model does not have.
``<!-- include: CHANGELOG.md -->`` is replaced by that file of the repository,
``<!-- include-code: examples/NAME.py -->`` by that program in a collapsed
block (the file itself, so the page cannot drift from what the suite runs).
The parameter tables of the API reference leave out private test seams
(parameters whose name starts with ``_``): they are not options.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = re.compile(r"^<!-- schema: (?P<target>[\w.]+) -->$", re.MULTILINE)
PRIVATE_PARAMETER = re.compile(
    r'<tr class="doc-section-item">\s*<td>\s*<code>_\w+</code>.*?</tr>', re.DOTALL
)
INCLUDE = re.compile(r"^<!-- include: (?P<path>[\w./-]+) -->$", re.MULTILINE)
INCLUDE_CODE = re.compile(r"^<!-- include-code: (?P<path>[\w./-]+\.py) -->$", re.MULTILINE)


def _type(spec: dict[str, Any]) -> str:
    """A short, readable type for one JSON Schema property."""
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in spec["enum"])
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in spec:
            return " \\| ".join(_type(option) for option in spec[key])
    kind = spec.get("type")
    if isinstance(kind, list):
        return " \\| ".join(_type({**spec, "type": one}) for one in kind)
    if kind == "array":
        return f"list[{_type(spec.get('items', {}))}]"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"dict[str, {_type(spec['additionalProperties'])}]"
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}.get(
        str(kind), str(kind or "any")
    )


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def schema_markdown(target: str) -> str:
    """The Markdown for one ``<!-- schema: module.Model -->`` line."""
    module, _, name = target.rpartition(".")
    model = getattr(importlib.import_module(module), name)
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    rows = [
        f"**`{name}`**: {_cell(schema.get('description', ''))}",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
    ]
    for field, spec in schema.get("properties", {}).items():
        if field in required:
            default = "required"
        elif "default" in spec:
            default = f"`{json.dumps(spec['default'])}`"
        else:
            default = ""
        rows.append(
            f"| `{field}` | {_type(spec)} | {default} | {_cell(spec.get('description', ''))} |"
        )
    whole = json.dumps(schema, indent=2)
    rows += [
        "",
        f'??? note "JSON Schema of `{name}`"',
        "",
        "    ```json",
        *(f"    {line}" for line in whole.splitlines()),
        "    ```",
        "",
    ]
    return "\n".join(rows)


def _code_block(path: str) -> str:
    code = (ROOT / path).read_text(encoding="utf-8")
    body = "\n".join(f"    {line}" if line else "" for line in code.splitlines())
    return f'??? example "The whole file: `{path}`"\n\n    ```python\n{body}\n    ```\n'


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Expand the schema and include markers of a page."""
    markdown = INCLUDE_CODE.sub(lambda m: _code_block(m["path"]), markdown)
    markdown = INCLUDE.sub(lambda m: (ROOT / m["path"]).read_text(encoding="utf-8"), markdown)
    return SCHEMA.sub(lambda m: schema_markdown(m["target"]), markdown)


def on_page_content(html: str, **_: Any) -> str:
    """Drop the rows of private test seams from the parameter tables."""
    return PRIVATE_PARAMETER.sub("", html)
