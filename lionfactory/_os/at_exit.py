"""What must end before the process does, also when it ends without the interpreter's teardown.

``python -m lionfactory`` ends with `os._exit` once its command is done (the
orderly teardown of a few hundred modules costs an MCP client a tenth of a
second per server), and `os._exit` skips `atexit`. A hook registered here
runs at a normal interpreter exit, as `atexit` runs it, and from
`run_exit_hooks` before such an `os._exit`: a background job or a first
snapshot's git still running then would otherwise be left to init, and a
sandbox launch cut short can leave a process waiting forever.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable

__all__ = ["at_exit", "run_exit_hooks"]

_HOOKS: list[Callable[[], None]] = []


def at_exit(hook: Callable[[], None]) -> Callable[[], None]:
    """Run `hook` when the process ends (a decorator); hooks run last-registered first."""
    _HOOKS.append(hook)
    atexit.register(_run_once, hook)
    return hook


def run_exit_hooks() -> None:
    """Run every hook now, last-registered first; each runs once, whatever the others raise."""
    for hook in reversed(list(_HOOKS)):
        _run_once(hook)


def _run_once(hook: Callable[[], None]) -> None:
    try:
        _HOOKS.remove(hook)
    except ValueError:
        return  # it ran already (run_exit_hooks, then the interpreter's exit)
    # An exit hook that fails must not keep the others from ending what they own.
    with contextlib.suppress(Exception):
        hook()
