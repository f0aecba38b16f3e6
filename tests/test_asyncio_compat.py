"""The public API also runs under asyncio (Jupyter, asyncio hosts).

pytest-trio's trio_mode would run an anyio-marked test under trio, so these
tests are plain functions that call `asyncio.run` themselves.
"""

from __future__ import annotations

import asyncio

from lionfactory import Branch, function_tool
from lionfactory.testing import ScriptedModel, tool_call


def slow_add(a: int, b: int) -> int:
    """Add in a worker thread (a sync function)."""
    return a + b


async def async_add(a: int, b: int) -> int:
    """Add on the event loop."""
    return a + b


def test_tool_call_and_act_under_asyncio():
    async def main():
        assert asyncio.get_running_loop() is not None
        tool = function_tool(slow_add)
        assert await tool(a=1, b=2) == {"result": 3}
        branch = Branch("sys")
        branch.register(tool)
        branch.register(function_tool(async_add))
        result = await branch.act("slow_add", {"a": 2, "b": 2})
        many = await branch.act_many(
            [("async_add", {"a": 1, "b": 1}), ("slow_add", {"a": 0, "b": 1})]
        )
        return result.result, [r.result for r in many]

    assert asyncio.run(main()) == ({"result": 4}, [{"result": 2}, {"result": 1}])


def test_agent_loop_and_clone_under_asyncio():
    async def main():
        branch = Branch(chat_model=ScriptedModel([tool_call("slow_add", a=1, b=1), "two"]))
        branch.register(function_tool(slow_add))
        answer = await branch.run("1+1?")
        clone = branch.clone()
        again = await clone.act("slow_add", {"a": 5, "b": 5})
        return answer, again.result

    assert asyncio.run(main()) == ("two", {"result": 10})


def test_builtin_tools_and_the_toolkit_under_asyncio(tmp_path):
    from lionfactory.coding import coding_toolkit
    from lionfactory.tools import bash_tool, reader_tool

    (tmp_path / "a.py").write_text("x = 1\n")

    async def main():
        bash = bash_tool(workspace_root=tmp_path)
        echoed = await bash(command="echo hi")
        window = await reader_tool(workspace_root=tmp_path)(action="read", path="a.py")
        branch = Branch("sys")
        branch.register(coding_toolkit, workspace_root=tmp_path, tools=["reader", "editor"])
        await branch.act("reader", {"action": "read", "path": "a.py"})
        edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
        edited = await branch.act("editor", edit)
        return echoed["stdout"], window["content"], edited.result["success"]

    assert asyncio.run(main()) == ("hi\n", "1\tx = 1", True)
    assert (tmp_path / "a.py").read_text() == "x = 2\n"
