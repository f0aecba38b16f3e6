"""Helpers several test modules share: the mechanisms as parameters, polling, live processes.

Importable from any test module: pytest puts this folder (the one holding
``conftest.py``) on ``sys.path``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest
import trio

from lionfactory._os.isolation import mechanism_problem


def mechanism_params() -> list[Any]:
    """``bwrap`` and ``landlock``, each skipped (with the reason) where it cannot work."""
    params = []
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        skip = pytest.mark.skipif(problem is not None, reason=f"{name}: {problem}")
        params.append(pytest.param(name, marks=skip))
    return params


async def eventually(predicate: Callable[[], bool], seconds: float) -> None:
    """Poll `predicate` (another process's state, which no event reports) until it holds."""
    with trio.fail_after(seconds):
        for _ in itertools.count():
            if predicate():
                return
            await trio.sleep(0.01)


def processes_tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose argv holds `tag`: seen from the host, any namespace."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                argv = cmdline.read()
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        state = data[data.rindex(b")") + 2 :].split()[0]
        if tag.encode() in argv and state not in (b"Z", b"X"):
            found.append(int(name))
    return found
