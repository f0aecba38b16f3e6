"""`Branch`: one conversation, its tools, and where each tool came from.

A branch records, for every registration, *what* built its tools: a static
Tool (or list), or a factory and the keyword arguments it was called with.
`clone()` replays those records against the clone: static tools are reused
(they are immutable), factories are called again with ``branch=clone``. So no
tool of a clone closes over its source branch, and a static tool that *is*
bound to the source is refused loudly instead of being shared (a shared bound
tool would let the clone act on its source's conversation).
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, cast

import anyio
import attrs

from lionfactory._acting import ActionResult, answer_result, arguments_object, execute_call
from lionfactory._approvals import Answer, PendingCall
from lionfactory._call import branch_collected
from lionfactory._checkpoints import (
    SCOPES,
    Checkpoint,
    CheckpointLog,
    RewindOptions,
    RewindReport,
    Scope,
)
from lionfactory._messages import (
    ChatModel,
    Message,
    MessageLog,
    ModelReply,
    ToolCall,
    call_message,
    new_tool_call,
)
from lionfactory._registration import (
    Registration,
    accepts_branch,
    as_tools,
    factory_path,
    foreign_tool,
    schema_hash,
    summarise,
)
from lionfactory._tool import SchemaStyle, Tool
from lionfactory.errors import (
    ApprovalPending,
    CheckpointNotFound,
    CloneError,
    ConfigurationError,
    RegistrationError,
    TurnLimitReached,
)

__all__ = ["Branch", "Saves"]


def _id_metadata(renamed: Mapping[str, str]) -> dict[str, Any]:
    """The assistant message's metadata for renamed call ids (none when nothing was renamed)."""
    return {"provider_call_ids": dict(renamed)} if renamed else {}


class Saves(Protocol):
    """Anything that saves a branch: a `BranchStore` (what `Branch.resume` checkpoints to)."""

    async def save(self, branch: Branch, /) -> int: ...


@attrs.define(eq=False, init=False, repr=False)
class Branch:
    """One conversation: its messages, its tools and their provenance.

    Args:
        system: the system prompt, pinned at view index 0.
        name: a display name; clones keep it unless given another.
        chat_model: what `run()` talks to (see `ChatModel`).
        metadata: free-form data for the caller; copied (shallowly) on clone.

    Attributes:
        id: a fresh UUID per branch (clones get their own).
        messages: the `MessageLog` (record and active view).
        tool_state: what a tool keeps with the branch across a save and a
            load, JSON-ready, by tool name (an active sandbox's worktree).
            Saved with the branch and set again before its factories are
            called on load; not copied on clone, because such state belongs
            to one branch (two branches must not share one worktree).
    """

    id: uuid.UUID
    name: str | None
    messages: MessageLog
    chat_model: ChatModel | None
    metadata: dict[str, Any]
    tool_state: dict[str, Any]
    _tools: dict[str, Tool]
    _owners: dict[str, Registration]
    _registrations: list[Registration]
    _pending: dict[str, PendingCall]
    _running: set[str]
    _checkpoints: CheckpointLog

    def __init__(
        self,
        system: str | None = None,
        *,
        name: str | None = None,
        chat_model: ChatModel | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a string or None, got {system!r}")
        messages = MessageLog()
        if system is not None:
            messages.set_system(system)
        self.__attrs_init__(
            id=uuid.uuid4(),
            name=name,
            messages=messages,
            chat_model=chat_model,
            metadata=dict(metadata or {}),
            tool_state={},
            tools={},
            owners={},
            registrations=[],
            pending={},
            running=set(),
            checkpoints=CheckpointLog(),
        )
        # Not referencing the branch: a dropped branch is collected, and
        # what its tools keep for it (jobs, supervisors) is released then.
        weakref.finalize(self, branch_collected, self.id)

    def __repr__(self) -> str:
        return (
            f"Branch(name={self.name!r}, id={str(self.id)[:8]}, "
            f"tools={list(self._tools)}, messages={len(self.messages)}/{self.messages.total})"
        )

    # -- registration --------------------------------------------------------

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The registered tools by name, in registration order (read-only, live)."""
        return MappingProxyType(self._tools)

    @property
    def registrations(self) -> tuple[Registration, ...]:
        """The provenance records still providing at least one tool, oldest first."""
        owners = set(map(id, self._owners.values()))
        return tuple(r for r in self._registrations if id(r) in owners)

    def provenance(self, name: str) -> Registration:
        """The registration that provided the tool `name`.

        Raises:
            KeyError: no tool of that name is registered.
        """
        try:
            return self._owners[name]
        except KeyError:
            raise KeyError(f"no tool named {name!r}; registered: {list(self._tools)}") from None

    def provenance_or_none(self, name: str) -> Registration | None:
        """The registration that provided `name`, or None."""
        return self._owners.get(name)

    def reorder(self, names: Sequence[str]) -> None:
        """Put the tools in this order; tools not named keep their order after them.

        Raises:
            KeyError: a name is not registered.
        """
        for name in names:
            self.provenance(name)
        rest = [n for n in self._tools if n not in set(names)]
        self._tools = {n: self._tools[n] for n in [*names, *rest]}

    # -- persistence ---------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The branch as JSON-ready data: messages, name, metadata, registrations.

        Live factory arguments (an Exchange, a chat model) and static tools
        are stored by name; `from_dict` needs them back as ``resources``.
        See `lionfactory._persist` for the format.

        Raises:
            ConfigurationError: `metadata` is not JSON-ready.
        """
        from lionfactory._persist import branch_to_dict

        return branch_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """`to_dict()` as JSON with sorted keys, so saved branches diff well."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, resources: Mapping[str, Any] | None = None
    ) -> Branch:
        """Restore a branch saved with `to_dict`, calling its factories again.

        Only registered factories are called (the built-ins, those given to
        `lionfactory.register_factory`, the ``lionfactory.factories`` entry
        points): saved data may come from another program, and nothing it
        names is imported otherwise.

        Args:
            data: what `to_dict` returned.
            resources: the live objects stored by name: factory arguments
                under their argument names (``"exchange"``), static tools as
                ``"tool:<name>"``, and optionally ``"chat_model"``.

        Raises:
            ConfigurationError: a factory is not registered, a resource is
                missing or the data is malformed; the message lists everything
                needed.
        """
        from lionfactory._persist import branch_from_dict

        return branch_from_dict(cls, data, resources)

    @classmethod
    def from_json(cls, text: str, *, resources: Mapping[str, Any] | None = None) -> Branch:
        """Restore a branch from `to_json()` output."""
        return cls.from_dict(json.loads(text), resources=resources)

    def register(
        self,
        source: Tool | Sequence[Tool] | Callable[..., Tool | Sequence[Tool]],
        /,
        *,
        update: bool = False,
        **kwargs: Any,
    ) -> list[Tool]:
        """Register a Tool, a list of Tools, or a factory, and record where they came from.

        A factory is called at once with ``**kwargs``, plus ``branch=self`` when
        it has a ``branch`` parameter. Registration is atomic: on any error the
        branch is unchanged.

        Args:
            source: the tool(s) or the factory.
            update: replace tools whose names are already registered.
            **kwargs: the factory's keyword arguments (factories only).

        Returns:
            The tools registered, in order.

        Raises:
            RegistrationError: a duplicate name without ``update``, a tool
                bound to another branch, or a source that is none of the above.
            FactoryError: the factory returned something other than Tools.
            TypeError: keyword arguments given with static tools, or ``branch``
                given explicitly.
        """
        tools, registration = self._build(source, kwargs)
        self._install(registration, tools, update=update)
        return tools

    def unregister(self, name: str) -> Tool:
        """Remove the tool `name` and return it.

        Raises:
            KeyError: no tool of that name is registered.
        """
        self.provenance(name)
        del self._owners[name]
        return self._tools.pop(name)

    def schemas(self, style: SchemaStyle = "openai") -> list[dict[str, Any]]:
        """The schemas of all registered tools, in registration order."""
        return [tool.schema(style) for tool in self._tools.values()]

    def manifest(self) -> list[dict[str, Any]]:
        """A JSON-ready, comparable description of the tool set.

        One entry per tool, in order: ``name``, ``factory`` (import path, or
        None for a static tool), ``kwargs`` (a summary: JSON values as they
        are, other objects as ``<TypeName>``), ``schema_hash`` and
        ``bound_to`` (``"branch"`` when bound to this branch, else None; ids
        are left out so that clones and test runs compare equal).
        """
        entries = []
        for name, tool in self._tools.items():
            registration = self._owners[name]
            entries.append(
                {
                    "name": name,
                    "factory": registration.factory_path,
                    "kwargs": {k: summarise(v) for k, v in sorted(registration.kwargs.items())},
                    "schema_hash": schema_hash(tool),
                    "bound_to": "branch" if tool.bound_to is not None else None,
                }
            )
        return entries

    # -- clone ---------------------------------------------------------------

    def clone(self, *, name: str | None = None) -> Branch:
        """A new branch with this one's messages and tools, rebuilt for the clone.

        The message record and active view are copied by reference (messages
        are immutable). Registrations are replayed in order: static tools are
        reused, factories are called again with ``branch=clone`` and the same
        keyword arguments, so shared resources (an Exchange, a workspace)
        stay shared and per-branch state is rebuilt.

        Raises:
            CloneError: a static tool is bound to this branch, or a factory
                did not rebuild a tool it provided here.
        """
        clone = Branch(
            name=self.name if name is None else name,
            chat_model=self.chat_model,
            metadata=self.metadata,
        )
        clone.messages = self.messages.copy()
        # Before the replay: the clone's toolkit reads its source's checkpoints.
        clone._checkpoints = self._checkpoints.copy()
        for registration in self.registrations:
            clone._replay(registration, registration.still_owned(self._owners.get))
        # Keep the source's tool order (an update= replacement keeps its slot).
        clone._tools = {n: clone._tools[n] for n in self._tools}
        clone.metadata["clone_of"] = str(self.id)
        # The clone's log holds the held calls without results, so it holds
        # them too, but undecided: a decision on this branch is not one on the
        # clone, and one approval must never run a call on two branches.
        clone._pending = {
            call_id: PendingCall(
                id=p.id, tool=p.tool, arguments=p.arguments, reason=p.reason, hook=p.hook
            )
            for call_id, p in self._pending.items()
        }
        return clone

    # -- checkpoints ---------------------------------------------------------

    @property
    def checkpoints(self) -> tuple[Checkpoint, ...]:
        """The checkpoints taken before this branch's file-changing calls, oldest first."""
        return tuple(entry.checkpoint for entry in self._checkpoints.entries)

    @property
    def checkpoint_log(self) -> CheckpointLog:
        """The checkpoint entries and rewinder, for the toolkit that takes them."""
        return self._checkpoints

    async def rewind(
        self,
        to: str,
        *,
        scope: Scope = "both",
        paths: Sequence[str] | None = None,
        dry_run: bool = False,
        force: Sequence[str] = (),
    ) -> RewindReport:
        """Put the files and/or the conversation back to how they were at checkpoint `to`.

        Args:
            to: a checkpoint id from `checkpoints` (or a report's ``undo``).
            scope: ``"code"`` (files only), ``"conversation"`` (the messages
                after the checkpoint's ``message_index`` leave the active view,
                kept in the record, and their read evidence with them) or
                ``"both"``.
            paths: restore only these workspace-relative paths (files only).
            dry_run: change nothing; report exactly what the call would do.
            force: conflicting paths to restore anyway.

        Returns:
            What was restored, deleted, left as a conflict or skipped, and the
            id of the checkpoint that undoes this rewind.

        Raises:
            CheckpointNotFound: `to` is not one of this branch's checkpoints.
            ConfigurationError: no toolkit with checkpoints is registered.
            ValueError: an unknown scope.
        """
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
        if isinstance(paths, str) or isinstance(force, str):
            raise TypeError("paths and force must be lists of paths, not a string")
        entry = self._checkpoints.find(to)
        if entry is None:
            raise CheckpointNotFound(to, len(self._checkpoints.entries))
        rewinder = self._checkpoints.rewinder
        if rewinder is None:
            raise ConfigurationError(
                "this branch has checkpoints but no toolkit to rewind them; register "
                "coding_toolkit (checkpoints=True) on it first"
            )
        options = RewindOptions(
            scope=scope,
            paths=None if paths is None else tuple(paths),
            dry_run=dry_run,
            force=tuple(force),
        )
        return await rewinder.rewind(self, entry, options)

    # -- closing -------------------------------------------------------------

    async def aclose(self) -> None:
        """Release what this branch's tools hold for it: kill its background jobs, drop kept output.

        Every tool handler that holds per-branch resources offers
        ``close_branch(branch_id)``; each distinct one is called once. The
        branch stays usable (a tool that needs a resource again starts it).
        Clones are separate branches with resources of their own.
        """
        seen: set[int] = set()
        for tool in self._tools.values():
            closer = getattr(tool.handler, "close_branch", None)
            owner = id(getattr(closer, "__self__", closer))
            if closer is None or owner in seen:
                continue
            seen.add(owner)
            await closer(self.id)

    async def __aenter__(self) -> Branch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- acting --------------------------------------------------------------

    async def act(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        call_id: str | None = None,
    ) -> ActionResult:
        """Call a tool as if the model had: log the call and its result.

        Appends an assistant message with the tool call and the tool message
        with the result. Invalid arguments, a denial, an unknown tool and an
        unexpected exception become an error the model reads; nothing raises
        except cancellation.

        A call a hook asks about (`ApprovalRequired`) does not run: its
        outcome is ``"pending"`` (``result.pending`` is the `PendingCall`, also
        in `pending_calls`) and its tool message is appended when it is
        decided and settled (`settle()` or `resume()`).

        A `call_id` that a held call already has is made unique (``<id>-2``,
        in ``result.call_id``; the assistant message's metadata maps it
        back under ``provider_call_ids``), so one approval never names two
        calls.

        `arguments` may also be the JSON text of an object (the form some
        frameworks hand over); any other string raises `ToolInputError`
        before anything is logged.
        """
        return await self._act(name, arguments, call_id, approved=False)

    async def _act(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        call_id: str | None,
        *,
        approved: bool,
    ) -> ActionResult:
        """`act`, or (``approved``) a call a host's person approved before it ran.

        A framework host that asks before running (the Agents SDK) approves
        a call the branch never held; the approval covers that call alone.
        """
        # `arguments_object`'s common case (a dict, copied) without its call.
        owned = dict(arguments) if type(arguments) is dict else arguments_object(name, arguments)
        call = new_tool_call(name, owned, call_id)
        made_id = call.id  # read once: a model's attribute reads are slow ones
        if made_id and made_id not in self._pending:
            # `_unique_ids`'s answer for one call whose id nothing holds, without
            # its call and the containers it builds: every act takes this path.
            calls: tuple[ToolCall, ...] = (call,)
            metadata: dict[str, Any] = {}
        else:
            calls, renamed = self._unique_ids((call,))
            (call,) = calls
            metadata = _id_metadata(renamed)
        self.messages.append(call_message(calls, metadata))
        # `_execute`'s two steps, here without its extra coroutine: every act runs this.
        result = await execute_call(self.id, self._tools, call, approved=approved)
        if result.pending is None:
            self.messages.append(result.message)
        else:
            self._pending[result.pending.id] = result.pending
        return result

    async def act_many(
        self, calls: Iterable[ToolCall | tuple[str, Mapping[str, Any]]]
    ) -> list[ActionResult]:
        """Run several tool calls concurrently in a task group.

        One assistant message carries all the calls; the tool messages are
        appended in call order once every call has finished.
        """
        normalised = [
            c if isinstance(c, ToolCall) else new_tool_call(c[0], dict(c[1])) for c in calls
        ]
        unique, renamed = self._unique_ids(normalised)
        normalised = list(unique)
        self.messages.append(call_message(unique, _id_metadata(renamed)))
        results: list[ActionResult | None] = [None] * len(normalised)

        async def run_one(i: int, call: ToolCall) -> None:
            results[i] = await self._execute(call)

        async with anyio.create_task_group() as group:
            for i, call in enumerate(normalised):
                group.start_soon(run_one, i, call)
        done = cast("list[ActionResult]", results)
        for result in done:
            if result.pending is None:
                self.messages.append(result.message)
        return done

    async def run(self, instruction: str, *, max_turns: int = 20) -> str:
        """The agent loop: ask the chat model, run its tool calls, repeat.

        Each turn sends the active view and the registered tools to
        `chat_model`. Tool calls of one reply run one after another, in
        order, because a model often reads a file and edits it in the same
        reply. The loop ends when the model answers without tool calls.

        A call that a hook asks about is held (`pending_calls`); the other
        calls of the reply still run, then the loop pauses with
        `ApprovalPending` and sends nothing more to the model until each
        held call is decided::

            try:
                text = await branch.run("clean up the build")
            except ApprovalPending as paused:
                branch.approve(paused.calls[0].id)
                text = await branch.resume()

        Args:
            instruction: the user message that starts this run.
            max_turns: how many model replies the run may take (default 20).

        Returns:
            The text of the model's last reply (the one without tool calls).

        Raises:
            ApprovalPending: calls wait for a decision (`approve`, `deny`,
                then `resume`).
            TurnLimitReached: `max_turns` replies were used and the last one
                still called tools (their results are recorded).
            ConfigurationError: the branch has no chat model, or calls of an
                earlier run still wait for a decision.
            ValueError: `max_turns` is below 1.
        """
        self._check_loop(max_turns)
        if self._pending:
            raise ConfigurationError(
                f"{len(self._pending)} held call(s) of an earlier run wait for a decision "
                f"({', '.join(self._pending)}); decide them with branch.approve()/deny() and "
                f"call branch.resume() before a new run()"
            )
        self.messages.append(Message(role="user", content=instruction))
        return await self._loop(max_turns)

    @property
    def pending_calls(self) -> tuple[PendingCall, ...]:
        """The held calls not yet settled (undecided, or decided and not yet run), oldest first."""
        return tuple(self._pending.values())

    def approve(self, call_id: str, *, arguments: Mapping[str, Any] | None = None) -> PendingCall:
        """Approve a held call; it runs, exactly once, on `settle()` or `resume()`.

        Args:
            call_id: the pending call's id.
            arguments: edited arguments to run instead of the model's. Every
                pre and security hook judges them again when the call runs:
                an ask is taken as answered, a denial still refuses.

        Returns:
            The updated record.

        Raises:
            KeyError: no pending call has that id.
            ConfigurationError: the call has already started.
            TypeError: `arguments` is not a JSON-ready mapping.
        """
        pending = self._decidable(call_id)
        edited = None
        if arguments is not None:
            if not isinstance(arguments, Mapping):
                raise TypeError(f"arguments must be a mapping, got {arguments!r:.200}")
            edited = dict(arguments)
        updated = attrs.evolve(
            pending, decision="approved", approved_arguments=edited, denial_reason=""
        )
        self._pending[call_id] = updated
        return updated

    def deny(self, call_id: str, reason: str) -> PendingCall:
        """Deny a held call; on `settle()` or `resume()` the model reads `reason` as its result.

        Raises:
            KeyError: no pending call has that id.
            ConfigurationError: the call has already started.
            ValueError: `reason` is empty (the model needs to know why).
        """
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("deny() needs a reason: the model reads it as the call's result")
        pending = self._decidable(call_id)
        updated = attrs.evolve(
            pending, decision="denied", denial_reason=reason, approved_arguments=None
        )
        self._pending[call_id] = updated
        return updated

    async def settle(
        self, *, store: Saves | None = None, only: Iterable[str] | None = None
    ) -> list[ActionResult]:
        """Run the approved held calls once each and answer the denied ones; ask nothing.

        Each approved call runs with its (possibly edited) arguments and its
        tool message is appended; each denied call's tool message is the
        denial's reason. Undecided calls stay pending. A record that was
        already started when the branch was saved (the process stopped
        mid-call) is not run again: the model is told its effects are
        unknown.

        Args:
            store: where to checkpoint (a `BranchStore`): the branch is saved
                after a call is marked as started and before it runs, and
                again when it is done, so a second process that loaded the
                same save cannot run it too (its save raises `ConflictError`
                before running anything) and a reload after a crash sees the
                call as started.
            only: settle just these call ids (a framework adapter settles
                the one call its host approved); default all.

        Returns:
            The results of the settled calls, in the order they were held.

        Raises:
            ConflictError: (with `store`) another writer saved the branch
                since this one was loaded; nothing was run.
        """
        results: list[ActionResult] = []
        wanted = None if only is None else set(only)
        for call_id, pending in list(self._pending.items()):
            if wanted is not None and call_id not in wanted:
                continue
            if call_id in self._running or call_id not in self._pending:
                continue  # run by a concurrent settle() of this same object
            if pending.status == "executing":
                results.append(self._finish_held(pending, "interrupted"))
            elif pending.decision == "denied":
                results.append(self._finish_held(pending, "denied"))
            elif pending.decision == "approved":
                results.append(await self._run_approved(pending, store))
                continue
            else:
                continue
            if store is not None:
                await store.save(self)
        return results

    async def resume(self, *, max_turns: int = 20, store: Saves | None = None) -> str:
        """Settle the decided held calls, then continue the loop as `run()` does.

        Every approved call runs exactly once (its result becomes its tool
        message), every denied call's reason is its tool message, and the
        model is asked again with those results.

        Args:
            max_turns: the replies the continued loop may take.
            store: checkpoint the calls to this store (see `settle`).

        Returns:
            The text of the model's final reply.

        Raises:
            ConfigurationError: nothing is pending (there is nothing to
                resume; a call is never run twice), or no chat model.
            ApprovalPending: held calls are still undecided (the decided ones
                have run), or the continued loop held new calls.
            TurnLimitReached: as for `run()`.
            ConflictError: (with `store`) another writer saved the branch
                first; nothing was run.
        """
        self._check_loop(max_turns)
        if not self._pending:
            raise ConfigurationError(
                "nothing to resume: this branch holds no pending call (a settled call is "
                "never run again); start a new turn with branch.run(...)"
            )
        await self.settle(store=store)
        undecided = [p for p in self._pending.values() if not p.decided]
        if undecided:
            raise ApprovalPending(undecided)
        return await self._loop(max_turns)

    # -- internals -----------------------------------------------------------

    def _replay(self, registration: Registration, names: Sequence[str]) -> None:
        """Install the tools `names` of `registration` on this branch again.

        The one replay of a recorded registration, shared by `clone()` and by
        restoring a saved branch: a factory is called again with
        ``branch=self`` and its recorded keyword arguments, and only the tools
        this branch should own are kept (a later ``update=`` registration may
        have taken the others' names); static tools are reused as they are.

        Raises:
            CloneError: the factory no longer provides one of `names`, it
                returned a tool bound to another branch, or a static tool is
                bound to a branch (it cannot be rebuilt, and sharing it would
                let two branches act on one conversation).
        """
        if registration.is_factory:
            factory = cast("Callable[..., Any]", registration.source)
            built = {t.name: t for t in self._call_factory(factory, registration.kwargs, self)}
            missing = [n for n in names if n not in built]
            if missing:
                raise CloneError(
                    f"factory {registration.factory_path} did not rebuild tool(s) "
                    f"{missing} for the clone; a factory must be deterministic in its names"
                )
            tools = [built[n] for n in names]
            if (tool := foreign_tool(tools, self.id)) is not None:
                raise CloneError(
                    f"factory {registration.factory_path} returned tool {tool.name!r} "
                    f"bound to branch {tool.bound_to}, not to the clone; it must build "
                    f"its tools from its `branch` argument"
                )
        else:
            static = {t.name: t for t in cast("tuple[Tool, ...]", registration.source)}
            tools = [static[n] for n in names if n in static]
            if (tool := foreign_tool(tools, None)) is not None:
                raise CloneError(
                    f"tool {tool.name!r} is bound to branch {tool.bound_to} and was "
                    f"registered as a static Tool, so the clone cannot rebuild it; "
                    f"register its factory instead (branch.register(factory, ...))"
                )
        for tool in tools:
            self._owners[tool.name] = registration
            self._tools[tool.name] = tool
        self._registrations.append(registration)

    @staticmethod
    def _call_factory(
        factory: Callable[..., Any], kwargs: Mapping[str, Any], branch: Branch
    ) -> list[Tool]:
        call_kwargs = dict(kwargs)
        if accepts_branch(factory):
            call_kwargs["branch"] = branch
        return as_tools(factory(**call_kwargs), factory)

    def _build(self, source: Any, kwargs: Mapping[str, Any]) -> tuple[list[Tool], Registration]:
        is_list = isinstance(source, (list, tuple))
        if isinstance(source, Tool) or (
            is_list and source and all(isinstance(t, Tool) for t in source)
        ):
            if kwargs:
                raise TypeError(
                    f"keyword arguments are for factories; got {sorted(kwargs)} with static tools"
                )
            tools = [source] if isinstance(source, Tool) else list(source)
            if (tool := foreign_tool(tools, self.id)) is not None:
                raise RegistrationError(
                    f"tool {tool.name!r} is bound to another branch ({tool.bound_to}); "
                    f"register its factory instead so this branch gets its own tool"
                )
            return tools, Registration(
                source=tuple(tools), kwargs={}, tool_names=tuple(t.name for t in tools)
            )
        if is_list or not callable(source):
            raise RegistrationError(
                f"register() takes a Tool, a non-empty list of Tools or a factory, "
                f"got {source!r:.200}"
            )
        if "branch" in kwargs:
            raise TypeError("do not pass branch=...; the branch passes itself to the factory")
        tools = self._call_factory(source, kwargs, self)
        if (tool := foreign_tool(tools, self.id)) is not None:
            raise RegistrationError(
                f"factory {factory_path(source)} returned tool {tool.name!r} bound to "
                f"another branch ({tool.bound_to}); it must build its tools from its "
                f"`branch` argument"
            )
        return tools, Registration(
            source=source, kwargs=kwargs, tool_names=tuple(t.name for t in tools)
        )

    def _install(self, registration: Registration, tools: list[Tool], *, update: bool) -> None:
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise RegistrationError(f"the source provides duplicate tool names {duplicates}")
        if not update:
            taken = [n for n in names if n in self._tools]
            if taken:
                raise RegistrationError(
                    f"tool name(s) {taken} already registered; pass update=True to replace them"
                )
        for tool in tools:
            self._tools[tool.name] = tool
            self._owners[tool.name] = registration
        self._registrations.append(registration)

    async def _execute(self, call: ToolCall, *, approved: bool = False) -> ActionResult:
        result = await execute_call(self.id, self._tools, call, approved=approved)
        if result.pending is not None:
            self._pending[result.pending.id] = result.pending
        return result

    def _unique_ids(
        self, calls: Sequence[ToolCall], *, against_log: bool = False
    ) -> tuple[tuple[ToolCall, ...], dict[str, str]]:
        """`calls` with every id unique: within the reply, among held calls, (and) in the log.

        Providers do repeat ids within one reply, and send empty ones; an
        approval names one call by its id, so two calls sharing one would
        let ``approve(id)`` run the other. The first call keeps its id; a
        repeat gets ``<id>-2`` (the next free number). The model's reply
        is recorded with the unique ids (a provider refuses a conversation
        whose tool calls share an id), and the assistant message's metadata
        maps each renamed id back to the one the provider sent
        (``provider_call_ids``).

        Args:
            calls: the calls of one reply (or one `act`).
            against_log: also avoid every id already in the log. A model's
                reply is checked against it; a host's own call ids (`act`)
                only against the held calls, because a host finds its
                recorded answers by its ids.

        Returns:
            The calls, and ``{unique id: id as sent}`` for those renamed.
        """
        if not against_log and len(calls) == 1 and calls[0].id and calls[0].id not in self._pending:
            return (calls[0],), {}  # one call (an `act`) whose id nothing holds: as below, cheaper
        taken = set(self._pending)
        if against_log:
            for message in self.messages.record:
                taken.update(c.id for c in message.tool_calls)
        out: list[ToolCall] = []
        renamed: dict[str, str] = {}
        for call in calls:
            if call.id and call.id not in taken:
                taken.add(call.id)
                out.append(call)
                continue
            base = call.id or "call"
            number = 2
            while f"{base}-{number}" in taken:
                number += 1
            unique = f"{base}-{number}"
            taken.add(unique)
            renamed[unique] = call.id
            out.append(call.model_copy(update={"id": unique}))
        return tuple(out), renamed

    def _check_loop(self, max_turns: int) -> None:
        if self.chat_model is None:
            raise ConfigurationError("Branch.run() needs a chat_model; pass one to Branch(...)")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns!r}")

    async def _loop(self, max_turns: int) -> str:
        """Ask the model and run its calls until it answers, holds a call, or turns run out."""
        model = cast("ChatModel", self.chat_model)
        text = ""
        for _ in range(max_turns):
            reply = await model(self.messages.active, list(self._tools.values()))
            if not isinstance(reply, ModelReply):
                raise TypeError(f"a chat model must return a ModelReply, got {reply!r:.200}")
            calls, renamed = self._unique_ids(reply.tool_calls, against_log=True)
            self.messages.append(
                Message(
                    role="assistant",
                    content=reply.text,
                    tool_calls=calls,
                    metadata=_id_metadata(renamed),
                )
            )
            text = reply.text
            if not calls:
                return text
            held = []
            for call in calls:
                result = await self._execute(call)
                if result.pending is None:
                    self.messages.append(result.message)
                else:
                    held.append(result.pending)
            if held:
                raise ApprovalPending(held)
        raise TurnLimitReached(max_turns, text)

    def _decidable(self, call_id: str) -> PendingCall:
        pending = self._pending.get(call_id)
        if pending is None:
            raise KeyError(f"no pending call {call_id!r}; pending: {list(self._pending) or 'none'}")
        if pending.status == "executing" or call_id in self._running:
            raise ConfigurationError(f"pending call {call_id!r} has already started; too late")
        return pending

    def _finish_held(self, pending: PendingCall, kind: Answer) -> ActionResult:
        """Answer a held call without running it: the answer becomes its tool message."""
        result = answer_result(pending, kind)
        self.messages.append(result.message)
        del self._pending[pending.id]
        return result

    async def _run_approved(self, pending: PendingCall, store: Saves | None) -> ActionResult:
        """Run one approved call once: mark it started (and save), run it, record it (and save)."""
        self._running.add(pending.id)
        try:
            self._pending[pending.id] = attrs.evolve(pending, status="executing")
            if store is not None:
                try:
                    await store.save(self)
                except BaseException:
                    # Not started: another writer got there first, or the save
                    # failed; the record stays as it was, undecided of nothing.
                    self._pending[pending.id] = pending
                    raise
            call = ToolCall(name=pending.tool, arguments=pending.run_arguments)
            call = call.model_copy(update={"id": pending.id})
            result = await execute_call(self.id, self._tools, call, approved=True)
            if result.pending is not None:
                # Held again for new steps of its own (a sub-agent's next
                # held step): the approval covered the steps it named.
                self._pending[pending.id] = result.pending
            else:
                self.messages.append(result.message)
                del self._pending[pending.id]
        finally:
            self._running.discard(pending.id)
        if store is not None:
            await store.save(self)
        return result
