"""``python -m lionfactory`` and the ``lionfactory`` console script (see `lionfactory._cli`)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lionfactory`` command line and return its exit status.

    Run as the program itself (no `argv`), it ends the process as soon as
    the command is done: an MCP client that closes a stdio server's input
    waits for the process to end, and the interpreter's orderly teardown of
    a few hundred modules took a tenth of a second or more on a busy
    machine. Nothing is left to tear down by then: output is flushed here,
    worker threads are idle, child processes were reaped by the tools, and
    what still runs in the background (a job, a first snapshot's git) is
    ended by the exit hooks, which `os._exit` would skip.
    """
    # Being the program, the process is ours: the cyclic collector waits
    # while the command loads (the modules, the tools' classes and models
    # allocate ~50,000 objects and set off a hundred collections that find
    # nothing to free); the command turns it back on once it is loaded.
    paused = argv is None and gc.isenabled()
    if paused:
        gc.disable()
    from lionfactory._cli import main as run

    status = run(argv, collector_paused=paused)
    if argv is None:
        from lionfactory._os.at_exit import run_exit_hooks

        run_exit_hooks()
        for stream in (sys.stdout, sys.stderr):
            # A closed pipe or stream: nothing more can be said on it.
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
