"""A second process for the checkpoint tests: load a saved branch, rewind it (or die trying).

``rewind DB BRANCH CHECKPOINT``: print the loaded checkpoints and the report.
``crash DB BRANCH CHECKPOINT``: rewind, killing itself with SIGKILL after two
file operations, as a crash would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import trio

from lionfactory.backends import SqliteBranchStore


async def main(mode: str, db: str, branch_id: str, checkpoint: str) -> None:
    async with SqliteBranchStore(db) as store:
        branch = await store.load(branch_id)
    if mode == "crash":
        import lionfactory.coding._checkpointing as checkpointing

        real = checkpointing.apply_op
        count = [0]

        def dying(root_fd: int, op: Any, blobs: Any) -> str:
            count[0] += 1
            if count[0] > 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(root_fd, op, blobs)

        checkpointing.apply_op = dying  # type: ignore[assignment]
    loaded = [c.id for c in branch.checkpoints]
    report = await branch.rewind(checkpoint)
    print(
        json.dumps(
            {
                "checkpoints": loaded,
                "restored": report.restored,
                "deleted": report.deleted,
                "conflicts": report.conflicts,
            }
        )
    )


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:5])
