"""`call_result_json`: the reply text a stdio server writes is the result `call_result` builds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lionfactory import Branch
from lionfactory.mcp._protocol import call_result, call_result_json
from lionfactory.tools import reader_tool


@pytest.fixture
async def outcomes(workspace: Any) -> dict[str, Any]:
    (workspace / "notes.txt").write_text('tab\there, "quotes", back\\slash, é and \u2028\n' * 40)
    branch = Branch()
    branch.register(reader_tool, workspace_root=workspace)
    return {
        "read": await branch.act("reader", {"action": "read", "path": "notes.txt"}),
        "typed failure": await branch.act("reader", {"action": "read", "path": "missing.txt"}),
        "invalid input": await branch.act("reader", {"action": "nope", "path": 3}),
        "unknown tool": await branch.act("writer", {}),
    }


@pytest.mark.parametrize("version", [None, "2024-11-05", "2025-06-18", "2026-07-28"])
async def test_the_spliced_json_is_the_result_call_result_builds(
    outcomes: dict[str, Any], version: str | None
) -> None:
    for name, action in outcomes.items():
        assert json.loads(call_result_json(action, version)) == call_result(action, version), name


async def test_meta_members_and_the_envelope_are_written_in_place(
    outcomes: dict[str, Any],
) -> None:
    meta = {"io.example/server": {"name": "x"}}
    for name, action in outcomes.items():
        plain = call_result_json(action, "2026-07-28", meta)
        wrapped = call_result_json(
            action,
            "2026-07-28",
            meta,
            members=',"resultType":"complete"',
            before='{"jsonrpc":"2.0","id":7,"result":',
            after="}\n",
        )
        assert (
            wrapped
            == '{"jsonrpc":"2.0","id":7,"result":' + plain[:-1] + ',"resultType":"complete"}}\n'
        )
        reply = json.loads(wrapped)
        expected = call_result(action, "2026-07-28")
        expected["_meta"] = {**expected.get("_meta", {}), **meta}
        assert reply == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {**expected, "resultType": "complete"},
        }, name
