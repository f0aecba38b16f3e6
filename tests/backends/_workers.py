"""Worker processes for the multi-process backend tests (run as a script, never imported by pytest).

    python _workers.py team URL NAMESPACE WORKER WORKERS BRANCHES MESSAGES
    python _workers.py writer DB_PATH ROUNDS BRANCH_ID...
    python _workers.py saver DB_PATH BRANCH_ID
    python _workers.py sender URL NAMESPACE SENDER_ID RECIPIENT_ID

``team``: one worker of a team of branches talking through a `RedisExchange`,
each branch through its `messenger` tool, its branch saved in a
`RedisBranchStore` after every receive. A restarted worker loads its branches
and goes on receiving. ``writer``: load, append, save in a loop on a shared
`SqliteBranchStore`, retrying on `ConflictError`. ``saver``: save a large
branch again and again, announcing each save, until it is killed.
``sender``: send to the recipient as fast as it can until the recipient is
unregistered (`UnknownOwnerError`), printing ``ready`` after the first send
and then the content of every send that succeeded, one per line.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import anyio

from lionfactory import Branch, Message
from lionfactory.backends import RedisBranchStore, RedisExchange, SqliteBranchStore
from lionfactory.errors import ConflictError, UnknownBranchError
from lionfactory.tools import messenger_tool


def team_ids(namespace: str, workers: int, branches: int) -> dict[str, uuid.UUID]:
    names = [f"w{w}b{b}" for w in range(workers) for b in range(branches)]
    return {n: uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{n}") for n in names}


def plan(names: list[str], messages: int) -> dict[str, list[tuple[str, int]]]:
    """Who sends what to whom: sender -> [(recipient, sequence number)]."""
    out: dict[str, list[tuple[str, int]]] = {}
    for i, name in enumerate(names):
        others = names[i + 1 :] + names[:i]
        out[name] = [(others[j % len(others)], j) for j in range(messages)]
    return out


def expected_for(name: str, names: list[str], messages: int) -> int:
    return sum(1 for sends in plan(names, messages).values() for to, _ in sends if to == name)


def print_line(text: str) -> None:
    print(text, flush=True)


async def team(
    url: str, namespace: str, worker: int, workers: int, branches: int, messages: int
) -> None:
    ids = team_ids(namespace, workers, branches)
    names = list(ids)
    sends = plan(names, messages)
    exchange = RedisExchange(url, namespace=namespace)
    store = RedisBranchStore(url, namespace=namespace)
    mine = [f"w{worker}b{b}" for b in range(branches)]
    team_branches: dict[str, Branch] = {}
    for name in mine:
        try:
            team_branches[name] = await store.load(ids[name], resources={"exchange": exchange})
        except UnknownBranchError:
            branch = Branch(name=name)
            branch.id = ids[name]
            branch.register(messenger_tool, exchange=exchange, roster=ids, sender_name=name)
            team_branches[name] = branch

    async def send_all(name: str) -> None:
        branch = team_branches[name]
        if branch.metadata.get("sent_all"):
            return
        for to, seq in sends[name]:
            sent = await branch.act(
                "messenger", {"action": "send", "to": to, "content": f"{name}:{seq}"}
            )
            assert sent.result is not None and sent.result["success"], sent
        branch.metadata["sent_all"] = True
        await store.save(branch)

    async with anyio.create_task_group() as tg:
        for name in mine:
            tg.start_soon(send_all, name)
    print_line("sent")

    async def receive_all(name: str) -> None:
        branch = team_branches[name]
        want = expected_for(name, names, messages)
        have = received_count(branch)
        while have < want:
            got = await branch.act("messenger", {"action": "receive", "timeout": 5})
            assert got.result is not None and got.result["success"], got
            await store.save(branch)
            have += len(got.result["messages"])
            print_line(f"got {name} {have}")

    async with anyio.create_task_group() as tg:
        for name in mine:
            tg.start_soon(receive_all, name)
    print_line("done")
    await store.aclose()
    exchange.close()


def received_count(branch: Branch) -> int:
    return sum(
        len(m.metadata["messenger"]["received"])
        for m in branch.messages.record
        if m.role == "tool" and "messenger" in m.metadata
    )


async def writer(path: str, rounds: int, branch_ids: list[str]) -> None:
    store = SqliteBranchStore(path)
    saved: list[str] = []
    conflicts = 0
    tag = uuid.uuid4().hex[:6]
    for i in range(rounds):
        target = branch_ids[i % len(branch_ids)]
        while True:
            branch = await store.load(target)
            content = f"{tag}:{i}"
            branch.messages.append(Message(role="user", content=content))
            try:
                await store.save(branch)
            except ConflictError:
                conflicts += 1
                continue
            saved.append(f"{target}/{content}")
            break
    await store.aclose()
    print_line(json.dumps({"saved": saved, "conflicts": conflicts}))


async def saver(path: str, branch_id: str) -> None:
    store = SqliteBranchStore(path)
    branch = await store.load(branch_id)
    while True:
        branch.messages.append(Message(role="user", content=f"save {len(branch.messages.record)}"))
        started = time.perf_counter()
        print_line(f"saving {len(branch.messages.record)}")
        await store.save(branch)
        print_line(f"saved {time.perf_counter() - started:.4f}")


def sender(url: str, namespace: str, sender_id: str, recipient_id: str) -> None:
    from lionfactory.errors import UnknownOwnerError

    exchange = RedisExchange(url, namespace=namespace)
    me, to = uuid.UUID(sender_id), uuid.UUID(recipient_id)
    sent: list[str] = []
    try:
        while True:
            content = f"{sender_id[:8]}:{len(sent)}"
            try:
                exchange.send(me, to, content)
            except UnknownOwnerError:
                break
            sent.append(content)
            if len(sent) == 1:
                print_line("ready")
    finally:
        exchange.close()
    print_line(json.dumps(sent))


def main(argv: list[str]) -> None:
    kind, *rest = argv
    if kind == "team":
        url, namespace, *numbers = rest
        worker, workers, branches, messages = map(int, numbers)
        anyio.run(team, url, namespace, worker, workers, branches, messages, backend="trio")
    elif kind == "writer":
        path, rounds, *branch_ids = rest
        anyio.run(writer, path, int(rounds), branch_ids, backend="trio")
    elif kind == "saver":
        anyio.run(saver, *rest, backend="trio")
    elif kind == "sender":
        sender(*rest)
    else:
        raise SystemExit(f"unknown worker kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
