"""The backends under several real processes: Redis team messaging, SQLite writers, a SIGKILL.

The workers are ``tests/backends/_workers.py`` run as scripts. These tests
take a few seconds each: they are the proof that nothing is lost or
duplicated between processes, so they run at full size.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from lionfactory import Branch, Message
from lionfactory.backends import RedisBranchStore, RedisExchange, SqliteBranchStore

WORKERS_SCRIPT = Path(__file__).with_name("_workers.py")
sys.path.insert(0, str(WORKERS_SCRIPT.parent))
from _workers import plan, team_ids  # noqa: E402

pytestmark = pytest.mark.slow

WORKERS, BRANCHES, MESSAGES = 4, 5, 500  # 20 branches x 500 = 10,000 messages


async def start(*args: str) -> Process:
    return await anyio.open_process(
        [sys.executable, str(WORKERS_SCRIPT), *args],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


class Lines:
    """A worker's stdout, line by line (a class, not an async generator: callers stop early)."""

    def __init__(self, process: Process) -> None:
        assert process.stdout is not None
        self.stream = process.stdout
        self.buffer = b""

    async def next(self) -> str | None:
        while b"\n" not in self.buffer:
            try:
                self.buffer += await self.stream.receive()
            except anyio.EndOfStream:
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


async def finish(process: Process, seen: list[str]) -> None:
    lines = Lines(process)
    while (line := await lines.next()) is not None:
        seen.append(line)
    assert process.stderr is not None
    errors = (await process.stderr.receive(1 << 20)).decode() if await process.wait() else ""
    assert process.returncode == 0, errors


async def test_four_processes_exchange_ten_thousand_messages_and_a_killed_worker_catches_up(
    redis_url: str, redis_namespace: str
) -> None:
    ids = team_ids(redis_namespace, WORKERS, BRANCHES)
    exchange = RedisExchange(redis_url, namespace=redis_namespace)
    for owner in ids.values():  # every inbox exists before anyone sends
        exchange.register(owner)
    argv = [redis_url, redis_namespace]
    numbers = [str(WORKERS), str(BRANCHES), str(MESSAGES)]
    outputs: dict[int, list[str]] = {w: [] for w in range(WORKERS)}

    with anyio.fail_after(240):
        victim = await start("team", *argv, "0", *numbers)
        async with anyio.create_task_group() as tg:
            for w in range(1, WORKERS):
                tg.start_soon(finish, await start("team", *argv, str(w), *numbers), outputs[w])
            # Kill worker 0 with SIGKILL once it has sent everything and taken
            # part of its mail, then start it again: it loads its branches and
            # must end with every message addressed to it.
            received, lines = 0, Lines(victim)
            while received < 3:
                line = await lines.next()
                assert line is not None, outputs[0]
                outputs[0].append(line)
                received += line.startswith("got ")
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            assert victim.returncode == -signal.SIGKILL
            await victim.aclose()
            outputs[0].append("-- killed --")
            tg.start_soon(finish, await start("team", *argv, "0", *numbers), outputs[0])

    assert "done" not in outputs[0][: outputs[0].index("-- killed --")]
    assert outputs[0][-1] == "done"
    store = RedisBranchStore(redis_url, namespace=redis_namespace)
    expected = collections.defaultdict(list)
    for sender, sends in plan(list(ids), MESSAGES).items():
        for to, seq in sends:
            expected[to].append(f"{sender}:{seq}")
    total = 0
    for name, owner in ids.items():
        branch = await store.load(owner, resources={"exchange": exchange})
        shown = [
            received["content"]
            for m in branch.messages.record
            if m.role == "tool" and "messenger" in m.metadata
            for received in m.metadata["messenger"]["received"]
        ]
        assert len(shown) == len(set(shown)), f"{name} was shown a message twice"
        assert sorted(shown) == sorted(expected[name]), f"{name} lost messages"
        by_sender = collections.defaultdict(list)
        for content in shown:
            sender, seq = content.rsplit(":", 1)
            by_sender[sender].append(int(seq))
        assert all(seqs == sorted(seqs) for seqs in by_sender.values()), f"{name}: order"
        # The last batch stays pending until the next receive acknowledges it
        # (it is in the saved record by then): that receive shows nothing new.
        final = await branch.act("messenger", {"action": "receive"})
        assert final.result is not None and final.result["messages"] == []
        assert exchange.peek(owner) == []
        total += len(shown)
    assert total == WORKERS * BRANCHES * MESSAGES == 10_000
    await store.aclose()
    exchange.close()


async def test_four_processes_saving_one_sqlite_store_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    branches = [Branch(name=f"b{i}") for i in range(2)]
    async with SqliteBranchStore(path) as store:
        for branch in branches:
            await store.save(branch)
    ids = [str(b.id) for b in branches]
    rounds = 30
    outputs: list[list[str]] = [[] for _ in range(4)]
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for out in outputs:
                tg.start_soon(finish, await start("writer", str(path), str(rounds), *ids), out)
    reports = [json.loads(out[-1]) for out in outputs]
    saved = [entry for report in reports for entry in report["saved"]]
    assert len(saved) == 4 * rounds
    conflicts = sum(report["conflicts"] for report in reports)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    async with SqliteBranchStore(path) as store:
        for branch_id in ids:
            loaded = await store.load(branch_id)
            appended = [f"{branch_id}/{m.content}" for m in loaded.messages.record]
            # Every successful save is there exactly once: a conflicting save
            # raised ConflictError (and was redone) instead of overwriting.
            assert sorted(appended) == sorted(s for s in saved if s.startswith(branch_id))
            assert await store.version(branch_id) == 1 + len(appended)
    print(f"{conflicts} conflicting saves were refused and redone")


async def test_a_save_killed_midway_leaves_the_previous_version_loadable(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    branch = Branch(name="big")
    for i in range(3000):
        branch.messages.append(Message(role="user", content=f"message {i} " + "x" * 400))
    async with SqliteBranchStore(path) as store:
        await store.save(branch)
    size = len(branch.messages.record)
    rng = random.Random(19)
    for attempt in range(2):
        saver = await start("saver", str(path), str(branch.id))
        durations: list[float] = []
        lines = Lines(saver)
        with anyio.fail_after(60):
            while (line := await lines.next()) is not None:
                if line.startswith("saved "):
                    durations.append(float(line.split()[1]))
                elif line.startswith("saving ") and len(durations) >= 2:
                    # Kill somewhere inside this save (it takes about as long
                    # as the previous ones): serialising, writing or committing.
                    # The pause picks the moment; it waits for nothing.
                    await anyio.sleep(rng.uniform(0, max(durations)))
                    break
            saver.send_signal(signal.SIGKILL)
            await saver.wait()
            await saver.aclose()
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",), attempt
        async with SqliteBranchStore(path) as store:
            loaded = await store.load(branch.id)
            version = await store.version(branch.id)
        count = len(loaded.messages.record)
        # Whole versions only: each save added exactly one message.
        assert count == size + version - 1
        assert loaded.messages.record[-1].content == (
            f"save {count - 1}" if count > size else f"message {size - 1} " + "x" * 400
        )


def test_the_team_plan_addresses_every_branch_evenly() -> None:
    ids = team_ids("x", WORKERS, BRANCHES)
    counts = collections.Counter(
        to for sends in plan(list(ids), MESSAGES).values() for to, _ in sends
    )
    assert sum(counts.values()) == 10_000
    assert set(counts) == set(ids)
    assert uuid.UUID(str(ids["w0b0"])) == ids["w0b0"]


async def test_unregister_loses_no_send_racing_it_from_processes_and_threads(
    redis_url: str, redis_namespace: str
) -> None:
    """Every send that succeeded is either received before or returned by unregister."""
    import threading

    from lionfactory.errors import UnknownOwnerError

    exchange = RedisExchange(redis_url, namespace=redis_namespace)
    try:
        for _ in range(5):
            recipient = uuid.uuid4()
            senders = [uuid.uuid4() for _ in range(4)]
            for owner in [recipient, *senders]:
                exchange.register(owner)
            processes = [
                await start("sender", redis_url, redis_namespace, str(s), str(recipient))
                for s in senders[:2]
            ]
            for process in processes:
                assert await Lines(process).next() == "ready"
            by_threads: list[list[str]] = [[], []]
            sending = [threading.Event(), threading.Event()]

            def send_until_refused(
                me: uuid.UUID, out: list[str], first: threading.Event, to: uuid.UUID
            ) -> None:
                while True:
                    content = f"{str(me)[:8]}:{len(out)}"
                    try:
                        exchange.send(me, to, content)
                    except UnknownOwnerError:
                        return
                    out.append(content)
                    first.set()

            threads = [
                threading.Thread(target=send_until_refused, args=args)
                for args in zip(senders[2:], by_threads, sending, [recipient] * 2, strict=True)
            ]
            for thread in threads:
                thread.start()
            for first in sending:
                await anyio.to_thread.run_sync(first.wait)
            got = [m.content for m in exchange.receive(recipient, limit=30)]
            handed = exchange.receive(recipient, ack=False, limit=20)  # pending when taken away
            left = await anyio.to_thread.run_sync(exchange.unregister, recipient)
            for thread in threads:
                await anyio.to_thread.run_sync(thread.join)
            outputs: list[list[str]] = []
            for process in processes:
                lines: list[str] = []
                await finish(process, lines)
                outputs.append(json.loads(lines[-1]))
            sent = [c for out in [*outputs, *by_threads] for c in out]
            delivered = got + [m.content for m in left]
            assert len(delivered) == len(set(delivered))
            assert set(delivered) == set(sent), (len(sent), len(delivered))
            assert {m.id for m in handed} <= {m.id for m in left}
            assert all(len(out) > 0 for out in [*outputs, *by_threads])
    finally:
        exchange.close()
