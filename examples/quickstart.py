"""Quickstart: tools from factories, an offline agent loop, and a clone that owns its tools.

Run it with ``python examples/quickstart.py``. It needs no network and no API
key: a `ScriptedModel` plays the model's part.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import trio
from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Branch, Message, Tool, function_tool
from lionfactory.testing import ScriptedModel, assert_no_foreign_bindings, tool_call


class TodoRequest(BaseModel):
    """Add an item to this conversation's to-do list."""

    model_config = ConfigDict(extra="forbid")
    item: str = Field(description="The to-do item, one short line.")


def todo_tool(branch: Branch, *, heading: str = "TODO") -> Tool:
    """A branch-bound factory: the tool writes into the branch it was built for."""

    async def add_todo(request: TodoRequest) -> dict[str, object]:
        branch.messages.append(Message(role="user", content=f"{heading}: {request.item}"))
        todos = [m.content for m in branch.messages.record if m.content.startswith(heading)]
        return {"added": request.item, "todos": len(todos)}

    return Tool(
        name="todo",
        description="Add an item to this conversation's to-do list.",
        request_model=TodoRequest,
        handler=add_todo,
        bound_to=branch.id,
    )


def count_lines(workspace: str, path: str) -> int:
    """Count the lines of a text file.

    Args:
        workspace: the workspace directory.
        path: the file, relative to the workspace.
    """
    return len((Path(workspace) / path).read_text().splitlines())


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "notes.txt").write_text("one\ntwo\nthree\n")
        model = ScriptedModel(
            [
                tool_call("count_lines", workspace=tmp, path="notes.txt"),
                tool_call("todo", item="summarise notes.txt"),
                "notes.txt has 3 lines; I added a to-do to summarise it.",
            ]
        )
        branch = Branch("You are a careful assistant.", name="quickstart", chat_model=model)
        branch.register(function_tool(count_lines))
        branch.register(todo_tool, heading="TODO")

        answer = await branch.run("How long is notes.txt? Then plan a summary.")
        print("answer:", answer)

        clone = branch.clone(name="quickstart-clone")
        result = await clone.act("todo", {"item": "only on the clone"})
        assert_no_foreign_bindings(clone)
        print("clone todo result:", result.result)
        print("source todos:", [m.content for m in branch.messages if m.content.startswith("TODO")])
        print("clone todos:", [m.content for m in clone.messages if m.content.startswith("TODO")])
        print("manifest:", json.dumps(clone.manifest(), indent=2))


if __name__ == "__main__":
    trio.run(main)
