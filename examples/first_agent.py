"""Your first coding agent: fix a bug, with a person approving the edit.

The model is a `FunctionModel`: a function of the conversation so far that
decides each reply, so this runs offline and every step reacts to what the
tools really returned. Swap in a real model (``OpenAICompatible``,
``AnthropicMessages``) and nothing else changes. Run it with
``python examples/first_agent.py``; the documentation's "Your first coding
agent" guide walks through it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import trio

from lionfactory import Branch, Message
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.errors import ApprovalPending
from lionfactory.testing import FunctionModel, tool_call

# -- the project the agent works on ------------------------------------------

BUGGY = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    return sum(values) / (len(values) - 1)
'''

NOTES = "mean() is off by one.\n"

CHECK = """from stats import mean

assert mean([1, 2, 3]) == 2, mean([1, 2, 3])
print("all good")
"""

# The interpreter running this example: the confined shell shows it (and its
# installed packages) read-only, so the check runs with the same Python.
RUN_CHECK = f"{sys.executable} check.py"


# -- the model: a function of the messages so far ------------------------------


def results(messages: list[Message]) -> list[dict]:
    """What every tool call returned so far, oldest first."""
    return [json.loads(m.content) for m in messages if m.role == "tool"]


def engineer(messages: list[Message], tools: list[dict]) -> object:
    """Run the check, read the code, fix it, check again, answer."""
    done = results(messages)
    if not done:
        return tool_call("bash", command=RUN_CHECK)
    last = done[-1]
    if len(done) == 1:
        if last["return_code"] == 0:
            return "Nothing to fix: the check passes."
        return tool_call("reader", action="read", path="stats.py")
    if len(done) == 2:
        # React to the real content: find the faulty line in what was read.
        if "(len(values) - 1)" not in last["content"]:
            return "I could not find the bug."
        return tool_call(
            "editor",
            action="edit",
            file_path="stats.py",
            old_string="(len(values) - 1)",
            new_string="len(values)",
        )
    if len(done) == 3:
        if not last.get("success"):
            return f"The edit was not made: {last.get('error')}"
        return tool_call("bash", command=RUN_CHECK)
    verdict = "passes" if last["return_code"] == 0 else "still fails"
    output = last["stdout"].strip()
    return f"Fixed mean(): it divided by len(values) - 1. The check {verdict}: {output}"


# -- the agent ---------------------------------------------------------------


def make_agent(workspace: Path, model: FunctionModel) -> Branch:
    branch = Branch("You fix bugs. Run the check before and after a change.", chat_model=model)
    branch.register(
        coding_toolkit,
        workspace_root=str(workspace),
        tools=["reader", "editor", "bash"],
        rules=[
            # A person approves every edit of a Python file ...
            Rule("editor", "*.py", "ask", reason="edits to code are reviewed"),
            # ... and no command may push, however it is spelled in a script.
            Rule("bash", "git push*", "deny", reason="pushing is for people"),
        ],
    )
    return branch


async def main() -> None:
    workspace = Path(tempfile.mkdtemp(prefix="first-agent-"))
    (workspace / "stats.py").write_text(BUGGY)
    (workspace / "check.py").write_text(CHECK)
    (workspace / "NOTES.md").write_text(NOTES)
    model = FunctionModel(engineer)
    agent = make_agent(workspace, model)

    # One call by hand first, on a clone (same messages, its own tools): an
    # edit before any read is refused by the read-before-edit guard, and
    # `.failed` says so without parsing the text the model would read.
    probe = agent.clone()
    blind = await probe.act(
        "editor",
        {"action": "edit", "file_path": "NOTES.md", "old_string": "off", "new_string": "on"},
    )
    print("blind edit failed:", blind.failed, "-", blind.payload["error"].split(" (")[0])

    # The agent loop: it runs the check, reads, and asks to edit.
    try:
        answer = await agent.run("The check fails. Fix stats.py.")
    except ApprovalPending as paused:
        (call,) = paused.calls
        print("waiting for approval:", call.tool, call.arguments["file_path"], "-", call.reason)

        # The process may stop here: the held call is saved with the branch.
        saved = agent.to_json()
        restored = Branch.from_json(saved, resources={"chat_model": model})
        print("restored, still pending:", [c.tool for c in restored.pending_calls])

        restored.approve(call.id)  # or restored.deny(call.id, "why not")
        answer = await restored.resume()  # runs the edit exactly once, then goes on
        agent = restored
    print("answer:", answer)
    print("stats.py now:", (workspace / "stats.py").read_text().splitlines()[2].strip())
    print("tools called:", [m.tool for m in agent.messages.active if m.role == "tool"])

    # The deny rule holds whatever the model writes.
    pushed = await agent.act("bash", {"command": "git status && git push origin main"})
    print("push refused:", pushed.failed, "-", pushed.error)


if __name__ == "__main__":
    trio.run(main)
