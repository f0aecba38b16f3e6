"""Which environment variables a started program gets: one policy, applied at the process seam.

A program started for a model should not see the API keys of the process
that started it: a confined command cannot write outside the workspace, but
it can print ``OPENAI_API_KEY`` into its output, which goes to the model
(and any log). `EnvPolicy` describes the environment in the steps the Codex
CLI's ``shell_environment_policy`` uses, in this order:

1. ``inherit``: start from ``"all"`` of the base environment, its ``"core"``
   (the names a shell and the running Python environment need, `CORE_NAMES`),
   or ``"none"``;
2. unless ``ignore_default_excludes``, drop every name matching
   `DEFAULT_EXCLUDES` (``*KEY*``, ``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``,
   ``*CREDENTIAL*``; case-insensitive);
3. drop the names matching ``exclude``;
4. add ``set``;
5. when ``include_only`` is given, keep only the names matching it.

What was dropped is reported by name (never by value), so a tool can tell the
model which variable a failing command was missing.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

import attrs

__all__ = ["CORE_NAMES", "DEFAULT_EXCLUDES", "EnvPolicy", "Environment", "checked_variables"]

Inherit = Literal["all", "core", "none"]

CORE_NAMES: frozenset[str] = frozenset(
    {
        # what a shell and ordinary programs expect
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "USERNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "TERM",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        # what selects the running Python environment (and the toolchains
        # whose shims PATH leads to)
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "PYENV_ROOT",
        "PYENV_VERSION",
        "PYTHONPATH",
        "PYTHONHOME",
        "UV_PYTHON",
        "NVM_DIR",
        "CARGO_HOME",
        "RUSTUP_HOME",
        # who commits and which git configuration applies (a hidden home's
        # ~/.gitconfig is unreadable under Landlock, which git treats as fatal)
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        # which certificate authorities TLS trusts (when the network is allowed)
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    }
)
"""The names ``inherit="core"`` keeps."""

DEFAULT_EXCLUDES: tuple[str, ...] = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*")
"""Patterns dropped unless ``ignore_default_excludes`` (matched case-insensitively)."""

_INHERIT = ("all", "core", "none")


@functools.cache
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    # One regex per pattern set: the policy runs on every call of a tool.
    return re.compile("|".join(fnmatch.translate(pattern.upper()) for pattern in patterns))


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return _compiled(patterns).match(name.upper()) is not None


def _patterns(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"expected a list of name patterns, got the string {value!r}")
    out = tuple(value)
    for pattern in out:
        if not isinstance(pattern, str) or not pattern:
            raise TypeError(f"a name pattern must be a non-empty string, got {pattern!r}")
    return out


def checked_variables(value: object, what: str) -> dict[str, str]:
    """`value` as environment variables, or the TypeError/ValueError that names `what`.

    One check for every mapping that becomes a process's environment (a
    policy's ``set``, a bash call's ``env``): the kernel takes ``NAME=value``
    strings, so a name may not be empty or hold ``=``, and neither part a NUL.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping of str to str, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{what} must map str to str, got {key!r}: {item!r}")
        if not key or "=" in key or "\x00" in key or "\x00" in item:
            raise ValueError(f"{what} has an invalid entry, got {key!r}: {item!r}")
    return dict(value)


def _variables(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(checked_variables(value, "set"))


@attrs.frozen
class Environment:
    """What `EnvPolicy.apply` produced.

    Attributes:
        variables: the program's complete environment.
        withheld: names of the base environment that the policy dropped
            (sorted; never their values).
    """

    variables: Mapping[str, str]
    withheld: tuple[str, ...]


@attrs.frozen
class EnvPolicy:
    """The environment a started program gets, derived from a base environment.

    Attributes:
        inherit: ``"all"``, ``"core"`` (`CORE_NAMES`) or ``"none"``.
        ignore_default_excludes: keep names matching `DEFAULT_EXCLUDES`.
        exclude: further name patterns (fnmatch, case-insensitive) to drop.
        set: variables to add or override (after the excludes, so a value
            given here is kept even if its name looks like a secret).
        include_only: when not empty, only names matching these patterns
            remain (applied last, to ``set`` too).

    Raises:
        ValueError: an unknown ``inherit`` or an invalid variable.
        TypeError: an option of the wrong type.
    """

    inherit: Inherit = "all"
    ignore_default_excludes: bool = False
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_patterns)
    set: Mapping[str, str] = attrs.field(factory=dict, converter=_variables, eq=False, hash=False)
    include_only: tuple[str, ...] = attrs.field(default=(), converter=_patterns)

    def __attrs_post_init__(self) -> None:
        if self.inherit not in _INHERIT:
            raise ValueError(f"inherit must be one of {', '.join(_INHERIT)}; got {self.inherit!r}")
        if not isinstance(self.ignore_default_excludes, bool):
            raise TypeError(
                f"ignore_default_excludes must be a bool, got {self.ignore_default_excludes!r}"
            )

    def apply(self, base: Mapping[str, str] | None = None) -> Environment:
        """The program's environment from `base` (default: ``os.environ`` now)."""
        source = dict(os.environ if base is None else base)
        if self.inherit == "all":
            kept = dict(source)
        elif self.inherit == "core":
            kept = {k: v for k, v in source.items() if k in CORE_NAMES}
        else:
            kept = {}
        if not self.ignore_default_excludes:
            kept = {k: v for k, v in kept.items() if not _matches(k, DEFAULT_EXCLUDES)}
        if self.exclude:
            kept = {k: v for k, v in kept.items() if not _matches(k, self.exclude)}
        kept.update(self.set)
        if self.include_only:
            kept = {k: v for k, v in kept.items() if _matches(k, self.include_only)}
        withheld = tuple(sorted(k for k in source if k not in kept))
        return Environment(MappingProxyType(kept), withheld)
