"""`BranchStore`: the contract on `SqliteBranchStore` and on `RedisBranchStore` (real server)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lionfactory import Branch, Exchange, Message, Tool, function_tool, register_factory
from lionfactory.backends import (
    BranchStore,
    RedisBranchStore,
    SqliteBranchStore,
    StoredBranch,
    open_store,
)
from lionfactory.errors import ConfigurationError, ConflictError, UnknownBranchError
from lionfactory.tools import messenger_tool, reader_tool


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BranchStore]:
    made: BranchStore
    if request.param == "sqlite":
        made = SqliteBranchStore(tmp_path / "branches.db")
    else:
        url = request.getfixturevalue("redis_url")
        made = RedisBranchStore(url, namespace=request.getfixturevalue("redis_namespace"))
    async with made:
        yield made


def a_branch(workspace: Path, name: str = "worker") -> Branch:
    branch = Branch("You read files.", name=name)
    branch.register(reader_tool, workspace_root=workspace)
    branch.messages.append(Message(role="user", content="read a.txt"))
    return branch


async def test_a_saved_branch_loads_with_its_messages_and_rebuilt_tools(
    store: BranchStore, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("hello\n", encoding="utf-8")
    branch = a_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "a.txt"})
    assert await store.save(branch) == 1
    loaded = await store.load(branch.id)
    assert loaded.id == branch.id and loaded.name == "worker"
    assert [m.model_dump() for m in loaded.messages.record] == [
        m.model_dump() for m in branch.messages.record
    ]
    assert list(loaded.tools) == ["reader"]
    assert loaded.tools["reader"] is not branch.tools["reader"]  # the factory ran again
    again = await loaded.act("reader", {"action": "read", "path": "a.txt"})
    assert again.result["content"] == "1\thello"
    assert await store.load(str(branch.id)) is not loaded  # a string id works too


async def test_every_save_is_a_new_version_listed_with_its_name(
    store: BranchStore, workspace: Path
) -> None:
    first, second = a_branch(workspace, "one"), a_branch(workspace, "two")
    await store.save(first)
    await store.save(second)
    first.messages.append(Message(role="user", content="more"))
    assert await store.save(first) == 2
    listed = await store.list()
    assert [(s.id, s.name, s.version) for s in listed] == [
        (second.id, "two", 1),
        (first.id, "one", 2),
    ]
    assert all(isinstance(s, StoredBranch) and s.saved_at.tzinfo is not None for s in listed)
    assert await store.version(first.id) == 2
    assert await store.version(uuid.uuid4()) == 0


async def test_delete_removes_a_branch(store: BranchStore, workspace: Path) -> None:
    branch = a_branch(workspace)
    await store.save(branch)
    assert await store.delete(branch.id) is True
    assert await store.delete(branch.id) is False
    assert await store.list() == []
    with pytest.raises(UnknownBranchError, match=str(branch.id)):
        await store.load(branch.id)


async def test_a_save_over_another_writers_newer_save_raises_conflict(
    store: BranchStore, workspace: Path
) -> None:
    branch = a_branch(workspace)
    await store.save(branch)
    mine = await store.load(branch.id)
    theirs = await store.load(branch.id)
    theirs.messages.append(Message(role="user", content="theirs"))
    await store.save(theirs)
    mine.messages.append(Message(role="user", content="mine"))
    with pytest.raises(ConflictError, match="load it again") as caught:
        await store.save(mine)
    assert (caught.value.expected, caught.value.found) == (1, 2)
    kept = await store.load(branch.id)
    assert kept.messages.record[-1].content == "theirs"
    # Redo the change on a fresh copy: that save goes through.
    kept.messages.append(Message(role="user", content="mine"))
    assert await store.save(kept) == 3


async def test_saving_a_new_branch_over_a_stored_id_raises_conflict(
    store: BranchStore, workspace: Path
) -> None:
    branch = a_branch(workspace)
    await store.save(branch)
    stranger = Branch.from_dict(branch.to_dict())  # same id, never loaded from the store
    with pytest.raises(ConflictError):
        await store.save(stranger)


async def test_a_missing_resource_is_named_on_load(store: BranchStore) -> None:
    exchange = Exchange()
    branch = Branch(name="talker")
    branch.register(messenger_tool, exchange=exchange, roster={"me": branch.id})
    await store.save(branch)
    with pytest.raises(ConfigurationError, match="'exchange'"):
        await store.load(branch.id)
    loaded = await store.load(branch.id, resources={"exchange": exchange})
    assert "messenger" in loaded.tools


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_stores_work_under_asyncio(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    def make() -> BranchStore:
        if backend == "sqlite":
            return SqliteBranchStore(tmp_path / "b.db")
        namespace = request.getfixturevalue("redis_namespace")
        return RedisBranchStore(request.getfixturevalue("redis_url"), namespace=namespace)

    async def main() -> str:
        async with make() as store:
            branch = Branch(name="asyncio")
            await store.save(branch)
            return (await store.load(branch.id)).name or ""

    assert asyncio.run(main()) == "asyncio"


def test_the_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    async def main() -> None:
        async with SqliteBranchStore(tmp_path / "b.db") as store:
            await store.save(Branch())

    asyncio.run(main())
    with sqlite3.connect(tmp_path / "b.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_open_store_picks_the_backend_from_the_url(tmp_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{tmp_path}/x.db"), SqliteBranchStore)
    assert open_store(f"sqlite:///{tmp_path}/x.db").path == tmp_path / "x.db"
    assert isinstance(open_store("redis://127.0.0.1:1/0"), RedisBranchStore)
    with pytest.raises(ValueError, match=r"sqlite:///path\.db"):
        open_store("postgres://x")
    with pytest.raises(ValueError, match="must exist"):
        SqliteBranchStore(tmp_path / "missing" / "x.db")


async def test_bad_ids_are_refused_with_the_value(store: BranchStore) -> None:
    with pytest.raises(TypeError, match="'nope'"):
        await store.load("nope")
    with pytest.raises(TypeError, match="save takes a Branch"):
        await store.save("nope")  # type: ignore[arg-type]


async def plant(store: BranchStore, branch_id: uuid.UUID, data: dict) -> None:
    """Write a saved branch the way another program sharing the store could."""
    from lionfactory.backends._store import encode

    envelope, _, record = encode(Branch("sys")).partition(b"\n")
    stored = json.loads(envelope)
    stored["registrations"] = data["planted"]
    await store._write(branch_id, None, 0, json.dumps(stored).encode() + b"\n" + record)


async def test_a_planted_factory_in_the_store_is_never_called(
    store: BranchStore, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    data = Branch("sys").to_dict()
    data["planted"] = [
        {
            "kind": "factory",
            "factory": "os:system",
            "kwargs": {"command": f"touch {marker}"},
            "tools": ["x"],
        }
    ]
    victim = uuid.uuid4()
    await plant(store, victim, data)
    with pytest.raises(ConfigurationError, match="'os:system' is not a registered factory"):
        await store.load(victim)
    assert not marker.exists()


async def test_metadata_with_a_lone_surrogate_is_saved_as_to_json_keeps_it(
    store: BranchStore,
) -> None:
    branch = Branch(metadata={"note": "half a pair: \ud800"})
    assert await store.save(branch) == 1
    assert (await store.load(branch.id)).metadata == {"note": "half a pair: \ud800"}


async def test_a_name_no_store_can_hold_is_a_configuration_error(store: BranchStore) -> None:
    branch = Branch(name="half \udc80")
    with pytest.raises(ConfigurationError, match=r"branch\.name"):
        await store.save(branch)
    assert await store.version(branch.id) == 0


async def test_a_stale_save_after_delete_and_recreate_is_a_conflict(
    store: BranchStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Store A saves X, B loads it, A deletes X and saves a new X: B's save must lose."""
    if isinstance(store, SqliteBranchStore):
        other: BranchStore = SqliteBranchStore(store.path)
    else:
        other = RedisBranchStore(request.getfixturevalue("redis_url"), namespace=store.namespace)
    async with other:
        first = Branch("sys", name="first")
        assert await store.save(first) == 1
        stale = await other.load(first.id)
        assert await store.delete(first.id)
        reborn = Branch("sys", name="reborn")
        reborn.id = first.id
        reborn.messages.append(Message(role="user", content="the new branch's work"))
        assert await store.save(reborn) == 2  # versions go on; they never restart
        stale.messages.append(Message(role="user", content="stale work"))
        with pytest.raises(ConflictError):
            await other.save(stale)
        loaded = await store.load(first.id)
        assert loaded.name == "reborn"
        assert [m.content for m in loaded.messages.record][-1] == "the new branch's work"


async def test_a_stale_save_after_delete_is_a_conflict(store: BranchStore, workspace: Path) -> None:
    branch = a_branch(workspace)
    await store.save(branch)
    assert await store.delete(branch.id)
    with pytest.raises(ConflictError):
        await store.save(branch)
    assert await store.version(branch.id) == 0
    assert await store.list() == []
    assert not await store.delete(branch.id)
    with pytest.raises(UnknownBranchError):
        await store.load(branch.id)


async def test_garbage_data_under_an_id_is_a_configuration_error(store: BranchStore) -> None:
    victim = uuid.uuid4()
    await store._write(victim, None, 0, b"not json\n[]")
    with pytest.raises(ConfigurationError, match="not a saved branch"):
        await store.load(victim)


async def test_a_branch_saved_with_its_record_written_whole_still_loads(
    store: BranchStore, workspace: Path
) -> None:
    # What earlier versions stored (and a hand-written row may hold): the
    # envelope without the compact mark, every message with every field.
    from pydantic import TypeAdapter

    from lionfactory._persist import branch_to_dict

    branch = a_branch(workspace)
    branch.messages.append(Message(role="assistant", content="", sender="a", metadata={"k": 1}))
    data = branch_to_dict(branch, dump_messages=False)
    record = data["messages"].pop("record")
    whole = TypeAdapter(list[Message]).dump_json(record)
    assert b'"call_id":null' in whole
    await store._write(branch.id, branch.name, 0, json.dumps(data).encode() + b"\n" + whole)
    loaded = await store.load(branch.id)
    assert loaded.messages.record == branch.messages.record
    assert [m.__pydantic_fields_set__ for m in loaded.messages.record] == [
        set(Message.model_fields)
    ] * len(record)


async def test_a_saved_record_leaves_out_default_fields_and_loads_them_back(
    store: BranchStore, workspace: Path
) -> None:
    branch = a_branch(workspace)
    branch.messages.append(Message(role="tool", content="{}", call_id="c1", tool="read"))
    await store.save(branch)
    _, blob = await store._read(branch.id)
    assert b"call_id" in blob and b'"sender"' not in blob and b'"channel"' not in blob
    loaded = await store.load(branch.id)
    assert loaded.messages.record == branch.messages.record
    for got, saved in zip(loaded.messages.record, branch.messages.record, strict=True):
        assert list(got.__dict__) == list(saved.__dict__)
        assert got.__pydantic_fields_set__ == set(Message.model_fields)


async def test_a_compact_record_with_a_bad_field_is_a_configuration_error(
    store: BranchStore,
) -> None:
    victim = uuid.uuid4()
    envelope = json.dumps(
        {"format": "lionfactory.branch/1", "messages": {"record_form": "defaults left out"}}
    )
    for record in (
        b'[{"id": "x", "role": "user", "created_at": "2026-01-01T00:00:00Z", "sender": 5}]',
        b'[{"id": "x", "role": "robot", "created_at": "2026-01-01T00:00:00Z"}]',
        b'[{"id": "x", "role": "user", "created_at": "2026-01-01T00:00:00Z", "extra": 1}]',
        b'[{"id": "x", "created_at": "2026-01-01T00:00:00Z"}]',
    ):
        await store.delete(victim)
        await store._write(
            victim, None, await store.version(victim), envelope.encode() + b"\n" + record
        )
        with pytest.raises(ConfigurationError, match="not a saved branch"):
            await store.load(victim)


async def test_a_store_file_from_before_tombstones_is_upgraded(tmp_path: Path) -> None:
    from lionfactory.backends._store import encode

    path = tmp_path / "old.db"
    branch = Branch("sys", name="old")
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE branches (id TEXT PRIMARY KEY, name TEXT, version INTEGER NOT NULL,"
        " saved_at REAL NOT NULL, data BLOB NOT NULL)"
    )
    db.execute(
        "INSERT INTO branches VALUES (?, ?, 3, 0.0, ?)", (str(branch.id), "old", encode(branch))
    )
    db.commit()
    db.close()
    async with SqliteBranchStore(path) as store:
        loaded = await store.load(branch.id)
        assert await store.save(loaded) == 4
        assert await store.delete(branch.id)
        assert await store.save(Branch.from_dict(branch.to_dict())) == 5


async def test_a_bad_index_member_does_not_break_listing(
    redis_url: str, redis_namespace: str
) -> None:
    import redis

    async with RedisBranchStore(redis_url, namespace=redis_namespace) as store:
        good = Branch(name="good")
        await store.save(good)
        raw = redis.Redis.from_url(redis_url)
        raw.zadd(f"{redis_namespace}:branches", {"not-a-uuid": 1.0, b"\xff\xfe": 2.0})
        broken = uuid.uuid4()
        raw.hset(
            f"{redis_namespace}:branch:{broken}",
            mapping={"version": "x", "saved_at": "y", "data": "z"},
        )
        raw.zadd(f"{redis_namespace}:branches", {str(broken): 3.0})
        raw.close()
        assert [s.id for s in await store.list()] == [good.id]
        with pytest.raises(ConfigurationError, match="malformed"):
            await store.load(broken)


@pytest.mark.slow
async def test_a_row_planted_for_a_stdio_session_runs_nothing_in_mcp_serve(
    tmp_path: Path, workspace: Path
) -> None:
    """The attack end to end: the real server, the official client, a shared SQLite store."""
    import os
    import sys

    from mcp import Client, StdioServerParameters

    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    db = tmp_path / "sessions.db"
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "lionfactory",
            "mcp",
            "serve",
            "--workspace",
            str(workspace),
            "--toolkit",
            "standalone",
            "--store",
            f"sqlite:///{db}",
            # The standalone bash is unconfined, so any store is writable by it;
            # this test plants the row itself and asks only what serving it runs.
            "--allow-writable-store",
            "--session",
            "victim",
        ],
        env=dict(os.environ),  # the client passes only a few variables by default
    )
    async with Client(server) as client:
        first = await client.call_tool("reader", {"action": "read", "path": "notes.txt"})
        assert not first.is_error
    # Another program that can write the store replaces the session's factories.
    marker = tmp_path / "pwned"
    planted = {
        "kind": "factory",
        "factory": "os:system",
        "kwargs": {"command": f"touch {marker}"},
        "tools": ["reader"],
    }
    with sqlite3.connect(db) as raw:
        [(row_id, data)] = raw.execute("SELECT id, data FROM branches").fetchall()
        envelope, _, record = bytes(data).partition(b"\n")
        stored = json.loads(envelope)
        stored["registrations"] = [planted]
        raw.execute(
            "UPDATE branches SET data = ? WHERE id = ?",
            (json.dumps(stored).encode() + b"\n" + record, row_id),
        )
    async with Client(server) as client:
        with contextlib.suppress(Exception):  # refused, however the server reports it
            await client.call_tool("reader", {"action": "read", "path": "notes.txt"})
    assert not marker.exists()


_COLLECTOR_SEEN: list[bool] = []


def _ping() -> str:
    """Answer pong."""
    return "pong"


def _recording_factory() -> Tool:
    """A registered factory that notes whether the collector runs while a load replays it."""
    _COLLECTOR_SEEN.append(gc.isenabled())
    return function_tool(_ping)


register_factory(_recording_factory, name="tests.backends:recording_factory")


@pytest.mark.parametrize("enabled", [True, False])
async def test_a_load_pauses_the_collector_and_leaves_it_as_it_was(
    store: BranchStore, enabled: bool
) -> None:
    branch = Branch("s", name="gc")
    branch.register(_recording_factory)
    await store.save(branch)
    _COLLECTOR_SEEN.clear()
    before = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        await store.load(branch.id)
        assert _COLLECTOR_SEEN == [False]  # paused while the branch was rebuilt
        assert gc.isenabled() is enabled
    finally:
        if before:
            gc.enable()


async def test_a_failed_load_leaves_the_collector_on(store: BranchStore) -> None:
    assert gc.isenabled()
    victim = uuid.uuid4()
    await store._write(victim, None, 0, b'{"format": 1}\n[{"role": 7}]')
    with pytest.raises(ConfigurationError, match="not a saved branch"):
        await store.load(victim)
    assert gc.isenabled()


def test_pauses_from_two_threads_switch_the_collector_back_on_once_both_end() -> None:
    from lionfactory.backends._store import collector_paused

    assert gc.isenabled()
    first_in, second_out = threading.Event(), threading.Event()
    states: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_out.wait(10)
            states.append(gc.isenabled())  # the second pause has ended: still paused

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with collector_paused():
        states.append(gc.isenabled())
    second_out.set()
    thread.join(10)
    assert states == [False, False]
    assert gc.isenabled()


async def test_redis_replies_are_parsed_by_hiredis_and_a_big_branch_comes_back_whole(
    redis_url: str, redis_namespace: str
) -> None:
    # The redis extra installs hiredis for this: redis-py's own parser took
    # three times as long to read a stored 4 MB branch. The branch here is
    # read in many of the parser's chunks.
    from importlib.metadata import requires

    needs = [req.partition(";") for req in requires("lionfactory") or []]
    redis_extra = [name for name, _, marker in needs if "redis" in marker]
    assert any(name.startswith("hiredis") for name in redis_extra), redis_extra
    branch = Branch(name="big")
    for i in range(3_000):
        branch.messages.append(Message(role="user", content=f"{i} " + '\u00e9"\\\n' * 200))
    async with RedisBranchStore(redis_url, namespace=redis_namespace) as store:
        pool = store._client.connection_pool
        connection = pool.get_connection()
        try:
            assert type(connection._parser).__name__ == "_HiredisParser"
        finally:
            pool.release(connection)
        await store.save(branch)
        loaded = await store.load(branch.id)
    assert [m.content for m in loaded.messages.record] == [
        m.content for m in branch.messages.record
    ]
