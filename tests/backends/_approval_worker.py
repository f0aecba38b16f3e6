"""A worker process for the approval tests (run as a script, never imported by pytest).

    python _approval_worker.py start DB MARKS          run until a call is held, save, die (SIGKILL)
    python _approval_worker.py resume DB BRANCH_ID     load, approve every held call, resume
    python _approval_worker.py settle DB BRANCH_ID     load and settle (no approving)

The held tool appends one line to the file MARKS each time it really runs;
``{"crash": true}`` makes it SIGKILL its own process right after, as a
machine losing power mid-call would. Each mode prints one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from lionfactory import Branch, Tool, function_tool, register_factory
from lionfactory.backends import SqliteBranchStore
from lionfactory.errors import ApprovalPending, ApprovalRequired, LionfactoryError
from lionfactory.testing import ScriptedModel, tool_call


def _ask(tool: str, arguments: dict[str, Any]) -> None:
    raise ApprovalRequired("writes the marks file")


def marker_tools(marks: str) -> Tool:
    """A factory (so a loaded branch rebuilds it): the `mark` tool, always held for approval."""

    def mark(note: str, crash: bool = False) -> str:
        """Append a note to the marks file."""
        with Path(marks).open("a") as out:
            out.write(note + "\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"marked {note}"

    return function_tool(mark).with_hooks(pre=[_ask])


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def start(db: str, marks: str, crash: bool) -> None:
    store = SqliteBranchStore(db)
    model = ScriptedModel([tool_call("mark", note="once", crash=crash)])
    branch = Branch("You mark files.", chat_model=model)
    branch.register(_registered_factory(), marks=marks)
    try:
        await branch.run("mark it")
    except ApprovalPending as paused:
        await store.save(branch)
        say(branch=str(branch.id), pending=[c.id for c in paused.calls])
    # No cleanup, no close: the process is killed as a crash would.
    os.kill(os.getpid(), signal.SIGKILL)


def _registered_factory() -> Any:
    """The factory under its module's name (not __main__'s), registered for loading.

    Loading a saved branch calls only registered factories, so every process
    that saves or loads it registers the one it trusts, as an application does.
    """
    from _approval_worker import marker_tools as factory

    return register_factory(factory)


async def resume(db: str, branch_id: str, approve: bool) -> None:
    _registered_factory()
    async with SqliteBranchStore(db) as store:
        branch = await store.load(
            branch_id, resources={"chat_model": ScriptedModel(["all marked"])}
        )
        try:
            if approve:
                for call in branch.pending_calls:
                    branch.approve(call.id)
                text = await branch.resume(store=store)
                say(text=text)
            else:
                results = await branch.settle(store=store)
                await store.save(branch)
                say(settled=[r.error_type for r in results], pending=len(branch.pending_calls))
        except LionfactoryError as exc:
            say(error=type(exc).__name__, message=str(exc))


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "start":
        anyio.run(start, args[0], args[1], len(args) > 2 and args[2] == "crash", backend="trio")
    elif mode in ("resume", "settle"):
        anyio.run(resume, args[0], args[1], mode == "resume", backend="trio")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
