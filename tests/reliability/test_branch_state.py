"""Branch invariants under random registration, cloning and context editing (stateful).

A `RuleBasedStateMachine` registers factories and static tools (bound and
unbound), unregisters, clones, appends, evicts, restores, compacts and calls
tools, on any branch it has made. After every step, for every branch:

* exactly one system message in the view, at index 0;
* the view is part of the record, without repeats, its original messages
  (not the pinned system message, not summaries) in record order; the
  record is append-only; compaction removes exactly the replaced messages
  and adds its summary;
* tool names are unique, and agree between tools, schemas, manifest and
  provenance;
* no tool reaches another branch (`assert_no_foreign_bindings`), and every
  bound tool is bound to its own branch;
* a step on one branch changes no other branch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)
from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Branch
from lionfactory._messages import Message, estimate_tokens
from lionfactory._tool import Tool
from lionfactory.errors import CloneError, RegistrationError
from lionfactory.testing import assert_no_foreign_bindings
from lionfactory.tools.reader import reader_tool

NAMES = ("alpha", "beta", "gamma", "delta")


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Where(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branch_id: str | None = Field(description="The branch the tool answers for.")


def bound_factory(*, branch: Branch, name: str) -> Tool:
    """A per-branch tool: its handler closes over the branch it was built for."""

    async def handler(_: Empty) -> Where:
        return Where(branch_id=str(branch.id))

    return Tool(
        name=name,
        description="Where am I?",
        request_model=Empty,
        handler=handler,
        bound_to=branch.id,
    )


def free_factory(*, name: str) -> Tool:
    """A shareable tool bound to nothing."""

    async def handler(_: Empty) -> Where:
        return Where(branch_id=None)

    return Tool(name=name, description="Nowhere.", request_model=Empty, handler=handler)


def pair_factory(*, branch: Branch, prefix: str) -> list[Tool]:
    """Two tools from one factory call, one bound and one free."""
    return [bound_factory(branch=branch, name=f"{prefix}_a"), free_factory(name=f"{prefix}_b")]


def state_of(branch: Branch) -> tuple[Any, ...]:
    return (
        [m.id for m in branch.messages.active],
        branch.messages.total,
        list(branch.tools),
        [id(t) for t in branch.tools.values()],
    )


class BranchMachine(RuleBasedStateMachine):
    branches = Bundle("branches")

    def __init__(self) -> None:
        super().__init__()
        self.all: list[Branch] = []
        self.records: dict[int, tuple[Message, ...]] = {}
        self.summaries: set[str] = set()
        self.workspace = Path(__file__).parent

    # -- bookkeeping -----------------------------------------------------------

    def others_unchanged(self, acting: Branch) -> Any:
        """Snapshot every other branch; the returned check asserts they did not change."""
        before = {id(b): state_of(b) for b in self.all if b is not acting}

        def check() -> None:
            for b in self.all:
                if b is not acting:
                    assert state_of(b) == before[id(b)], f"a step on {acting!r} changed {b!r}"

        return check

    @staticmethod
    def has_static_bound_tool(branch: Branch) -> bool:
        return any(
            tool.bound_to is not None and not branch.provenance(name).is_factory
            for name, tool in branch.tools.items()
        )

    # -- rules: tools ------------------------------------------------------------

    @initialize(target=branches)
    def first_branch(self) -> Branch:
        branch = Branch("You are a test branch.", name="root")
        self.all.append(branch)
        return branch

    @rule(
        branch=branches,
        name=st.sampled_from(NAMES),
        kind=st.sampled_from(["bound", "free", "pair", "static", "static bound", "reader"]),
        update=st.booleans(),
    )
    def register(self, branch: Branch, name: str, kind: str, update: bool) -> None:
        check = self.others_unchanged(branch)
        before = state_of(branch)
        names = {
            "pair": [f"{name}_a", f"{name}_b"],
            "reader": ["reader"],
        }.get(kind, [name])
        taken = [n for n in names if n in branch.tools]
        try:
            if kind == "bound":
                branch.register(bound_factory, name=name, update=update)
            elif kind == "free":
                branch.register(free_factory, name=name, update=update)
            elif kind == "pair":
                branch.register(pair_factory, prefix=name, update=update)
            elif kind == "static":
                branch.register(free_factory(name=name), update=update)
            elif kind == "static bound":
                branch.register(bound_factory(branch=branch, name=name), update=update)
            else:
                branch.register(reader_tool, workspace_root=self.workspace, update=update)
        except RegistrationError:
            assert taken and not update, (kind, names, list(branch.tools))
            assert state_of(branch) == before, "a refused registration changed the branch"
        else:
            assert not taken or update
            assert all(n in branch.tools for n in names)
        check()

    @rule(branch=branches, data=st.data())
    def unregister(self, branch: Branch, data: st.DataObject) -> None:
        if not branch.tools:
            return
        check = self.others_unchanged(branch)
        name = data.draw(st.sampled_from(sorted(branch.tools)))
        branch.unregister(name)
        assert name not in branch.tools and branch.provenance_or_none(name) is None
        check()

    @rule(target=branches, branch=branches)
    def clone(self, branch: Branch) -> Any:
        check = self.others_unchanged(branch)
        before = state_of(branch)
        if self.has_static_bound_tool(branch):
            with pytest.raises(CloneError):
                branch.clone()
            assert state_of(branch) == before
            check()
            return multiple()
        clone = branch.clone(name=f"clone-{len(self.all)}")
        assert state_of(branch) == before
        check()
        assert [m.id for m in clone.messages.active] == [m.id for m in branch.messages.active]
        assert clone.messages.record == branch.messages.record
        assert list(clone.tools) == list(branch.tools)
        assert clone.manifest() == branch.manifest()
        assert clone.id != branch.id
        self.all.append(clone)
        return clone

    @rule(branch=branches, data=st.data())
    def act(self, branch: Branch, data: st.DataObject) -> None:
        if not branch.tools:
            return
        check = self.others_unchanged(branch)
        name = data.draw(st.sampled_from(sorted(branch.tools)))
        arguments = {"action": "list_dir", "path": "."} if name == "reader" else {}
        result = trio.run(branch.act, name, arguments)
        assert result.ok, result.error
        assert result.result is not None
        if branch.tools[name].bound_to is not None:
            assert result.result["branch_id"] == str(branch.id)
        check()

    # -- rules: messages -----------------------------------------------------------

    @rule(branch=branches, role=st.sampled_from(["user", "assistant"]), text=st.text(max_size=5))
    def append(self, branch: Branch, role: str, text: str) -> None:
        check = self.others_unchanged(branch)
        branch.messages.append(Message(role=role, content=text))  # type: ignore[arg-type]
        check()

    @rule(branch=branches)
    def a_second_system_message_is_refused(self, branch: Branch) -> None:
        before = state_of(branch)
        with pytest.raises(ValueError, match="system"):
            branch.messages.append(Message(role="system", content="again"))
        assert state_of(branch) == before

    @rule(branch=branches, text=st.text(max_size=5))
    def set_system(self, branch: Branch, text: str) -> None:
        check = self.others_unchanged(branch)
        branch.messages.set_system(text)
        assert branch.messages.active[0].content == text
        check()

    @rule(branch=branches, start=st.integers(-4, 12), end=st.none() | st.integers(-4, 12))
    def evict(self, branch: Branch, start: int, end: int | None) -> None:
        check = self.others_unchanged(branch)
        system = branch.messages.active[0]
        branch.messages.evict(start, end)
        assert branch.messages.active[0] is system
        check()

    @rule(branch=branches, start=st.integers(-4, 40), end=st.none() | st.integers(-4, 40))
    def restore(self, branch: Branch, start: int, end: int | None) -> None:
        check = self.others_unchanged(branch)
        branch.messages.restore(start, end)
        check()

    @precondition(lambda self: any(len(b.messages) > 1 for b in self.all))
    @rule(branch=branches, data=st.data())
    def compact(self, branch: Branch, data: st.DataObject) -> None:
        view = branch.messages.active
        if len(view) < 2:
            return
        check = self.others_unchanged(branch)
        chosen = data.draw(
            st.lists(st.sampled_from(range(1, len(view))), min_size=1, unique=True).map(sorted)
        )
        summary = Message(role="user", content="summary")
        branch.messages.replace([view[i].id for i in chosen], summary)
        self.summaries.add(summary.id)
        # The replaced messages leave, the others keep their order, the
        # summary is in. (Where exactly: test_a_summary_takes_the_first_replaced_place.)
        kept = [m.id for i, m in enumerate(view) if i not in chosen]
        after = [m.id for m in branch.messages.active]
        assert [i for i in after if i != summary.id] == kept
        assert summary.id in after
        check()

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def one_system_message_first(self) -> None:
        for branch in self.all:
            roles = [m.role for m in branch.messages.active]
            assert roles[:1] == ["system"] and roles.count("system") == 1, roles

    @invariant()
    def view_is_part_of_the_record_in_order(self) -> None:
        for branch in self.all:
            log = branch.messages
            record = log.record
            previous = self.records.get(id(branch), ())
            assert record[: len(previous)] == previous, "the record is append-only"
            self.records[id(branch)] = tuple(record)
            ids = [m.id for m in log.active]
            assert len(set(ids)) == len(ids), "a message appears twice in the view"
            positions = [log.record_index(i) for i in ids]
            assert all(record[p] is m for p, m in zip(positions, log.active, strict=True))
            # The pinned system message (set_system appends a new one to the
            # record) and summaries sit by position, not by record index.
            originals = [
                p for p, i in zip(positions[1:], ids[1:], strict=True) if i not in self.summaries
            ]
            assert originals == sorted(originals), "originals out of record order"

    @invariant()
    def running_token_estimate_matches_the_view(self) -> None:
        for branch in self.all:
            assert branch.messages.estimate_tokens() == estimate_tokens(branch.messages.active)

    @invariant()
    def tool_names_are_unique_and_agree(self) -> None:
        for branch in self.all:
            names = list(branch.tools)
            assert len(set(names)) == len(names)
            assert [s["function"]["name"] for s in branch.schemas()] == names
            assert [e["name"] for e in branch.manifest()] == names
            for name, tool in branch.tools.items():
                assert tool.name == name
                assert name in branch.provenance(name).tool_names

    @invariant()
    def no_tool_reaches_another_branch(self) -> None:
        for branch in self.all:
            assert_no_foreign_bindings(branch)
            for tool in branch.tools.values():
                assert tool.bound_to in (None, branch.id)


TestBranchInvariants = BranchMachine.TestCase


def test_a_summary_takes_the_first_replaced_place():
    """Found by the state machine: two summaries of one message, compact the older.

    Restoring a retired summary puts it beside a newer summary of the same
    message; compacting the older one must put the new summary in its place.
    """
    log = Branch("system").messages
    first = log.append(Message(role="user", content="m1"))
    older = log.replace([first.id], Message(role="user", content="S1"))
    log.restore(0)  # m1 is back; S1 retires
    log.replace([first.id], Message(role="user", content="S2"))
    log.restore(log.record_index(older.id))  # S1 and S2 are both in the view
    assert [m.content for m in log.active] == ["system", "S1", "S2"]
    log.replace([older.id], Message(role="user", content="S3"))
    assert [m.content for m in log.active] == ["system", "S3", "S2"]
