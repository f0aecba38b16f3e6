"""The confinement mechanisms as test parameters, each skipped where this machine lacks it.

One place for what eight test modules asked the same way. Importable from
any test module: pytest puts this folder (the one holding ``conftest.py``)
on ``sys.path``.
"""

from __future__ import annotations

from typing import Any

import pytest

from lionfactory._os.isolation import mechanism_problem


def mechanism_params() -> list[Any]:
    """``bwrap`` and ``landlock``, each skipped (with the reason) where it cannot work."""
    params = []
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        skip = pytest.mark.skipif(problem is not None, reason=f"{name}: {problem}")
        params.append(pytest.param(name, marks=skip))
    return params
