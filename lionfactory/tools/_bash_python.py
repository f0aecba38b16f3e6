"""Which Python a confined ``bash`` command gets: the workspace's own virtual environment first.

An agent started as ``.venv/bin/python agent.py`` runs on its own
interpreter, but the commands it runs in the workspace are the project's:
``python``, ``pip`` and ``pytest`` there must be the project's virtual
environment when it has one, the way a developer who activated it would
have them, and never silently the agent's runtime (whose packages are not
the project's) nor whatever a version manager puts first on PATH (whose
``pip install`` may not even be writable). So a confined command's PATH
starts with the workspace's environment's ``bin`` and ``VIRTUAL_ENV``
names it: the environment that ``VIRTUAL_ENV`` names when it lies inside
the workspace, else ``.venv``, else ``venv``. A workspace without one keeps
PATH as it is.

When a failed command's output says a package is missing or could not be
installed, `interpreter_notice` says which interpreter ran and how to pick
another, so the model does not retry the same ``pip install`` blindly.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["interpreter_notice", "project_environment", "with_project_python"]

_NAMES = (".venv", "venv")
_PYTHON_PROGRAMS = re.compile(r"^(?:python[0-9.]*|pip[0-9.]*|pytest|uv)$")
# What a missing package or a failed install prints (Python, pip, pyenv's shims).
_PYTHON_TROUBLE = re.compile(
    r"ModuleNotFoundError|No module named|ImportError|externally-managed-environment"
    r"|cannot rehash|Could not install packages|No matching distribution"
    r"|site-packages.*(?:Permission denied|Read-only file system)"
    r"|Defaulting to user installation|pip: command not found"
    r"|python[0-9.]*: command not found|No such file or directory: '?python",
    re.IGNORECASE,
)


def _is_environment(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() and (path / "bin" / "python").exists()


def project_environment(root: Path, env: Mapping[str, str]) -> Path | None:
    """The workspace's own virtual environment, or None.

    ``VIRTUAL_ENV`` counts only when it lies inside the workspace: one
    elsewhere is the agent's (or the user's shell's), not the project's.
    """
    named = env.get("VIRTUAL_ENV")
    if named:
        path = Path(os.path.normpath(named))
        if path.is_absolute() and (path == root or root in path.parents) and _is_environment(path):
            return path
    for name in _NAMES:
        candidate = root / name
        if not candidate.is_symlink() and _is_environment(candidate):
            return candidate
    return None


def with_project_python(root: Path, env: Mapping[str, str]) -> tuple[dict[str, str], Path | None]:
    """`env` with the workspace's virtual environment first on PATH (when it has one)."""
    found = project_environment(root, env)
    result = dict(env)
    if found is None:
        return result, None
    bin_dir = str(found / "bin")
    rest = [p for p in result.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    # Another environment's bin (the agent's own, activated) would shadow nothing
    # now, but it would still answer `python3.X`: it goes.
    outside = result.get("VIRTUAL_ENV")
    if outside and Path(outside) != found:
        rest = [p for p in rest if p != str(Path(outside) / "bin")]
    result["PATH"] = os.pathsep.join([bin_dir, *rest])
    result["VIRTUAL_ENV"] = str(found)
    result.pop("PYTHONHOME", None)  # it would point the environment's python elsewhere
    return result, found


def interpreter_notice(
    argv: Sequence[str], output: str, env: Mapping[str, str], environment: Path | None
) -> str | None:
    """Which Python ran a command that failed on a package, and how to choose another; or None."""
    words = [os.path.basename(word) for word in argv[:8]]
    if not any(_PYTHON_PROGRAMS.match(word) for word in words) and "python" not in " ".join(argv):
        return None
    if _PYTHON_TROUBLE.search(output) is None:
        return None
    path = env.get("PATH", os.defpath)
    python = shutil.which("python", path=path) or shutil.which("python3", path=path)
    if environment is not None:
        where = f"the workspace's virtual environment {environment}"
        advice = (
            "install into it with `python -m pip install ...`; to use another "
            "interpreter, call it by its path (e.g. `/usr/bin/python3 ...`)"
        )
    else:
        where = "the first on PATH (the workspace has no .venv or venv)"
        advice = (
            "to give the project its own, run `python -m venv .venv` in the workspace (then "
            "python and pip mean it in later commands), or call another interpreter by its path"
        )
    ran = python or "no python"
    return f"python and pip here are {ran}, {where}: {advice}."
