"""The first walk of a large tree, in a process of its own.

Run as a script (``python -I -S tree_walk_main.py FD MASK TOP PATTERN [NAME ...]``)
by `TreeWatch.prewarm`. `TreeWatch` also imports `walk` and `list_folder` for
the walks it makes itself (a folder created later, a walk a caller waits for).

Why a process of its own: the first walk of the toolchain trees a
confinement exposes (a venv, pyenv, rustup: 20,000 folders and 150,000
entries) is one to two seconds of Python. In a thread it held the
interpreter lock against everything the process did meanwhile: an MCP
server's start-up and its first few hundred reads ran 1.2-1.5x slower than
without it. Here the walk adds its watches to the parent's inotify instance
(``FD``, inherited: a watch belongs to the instance, not to the process that
added it), so each folder is still watched before it is listed and every
change after that is still reported to the parent.

``MASK`` is the inotify event mask, ``PATTERN`` the regular expression a
lower-cased file name matches when it is a credential name, the ``NAME``
arguments the file names whose content the parent judges. Output on stdout,
NUL-terminated fields: ``w``, WD, FOLDER for each watched folder; ``s``,
PATH for a credential name; ``c``, PATH for a file to judge. Exit status 3:
the watch limit (or the kernel's memory for watches) was reached.

Only the standard library is imported: the script runs without site
packages, and nothing in it may depend on the package being importable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import sys
from collections.abc import Callable

LIMIT_STATUS = 3
"""The exit status that says the watch limit was reached."""


def git_objects(folder: str, name: str) -> bool:
    """Whether `name` in `folder` is a git object store: hashes as names, never a credential.

    Skipped by every walk: a clone's store holds hundreds of folders (and a
    credential in a repository is in its config, which is checked).
    """
    return name == "objects" and os.path.basename(folder) == ".git"


def list_folder(folder: str, subfolders: list[str]) -> list[os.DirEntry[str]]:
    """The files (and links) in `folder`; its subfolders go onto `subfolders` (never a link)."""
    files = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if not is_dir:
                    files.append(entry)
                elif not git_objects(folder, entry.name):
                    subfolders.append(entry.path)
    except OSError:
        pass
    return files


def walk(
    add_watch: Callable[[str], int],
    top: str,
    secret_name: Callable[[str], bool],
    checked_name: Callable[[str], bool],
) -> tuple[dict[int, str], list[str], list[str]] | None:
    """Watch and list every folder of `top`: (folders by wd, credential names, files to judge).

    `add_watch` returns the new watch's descriptor, or -1 with ``errno``
    set (ctypes' copy). Each folder is watched before it is listed, so an
    entry created meanwhile is either listed or reported. None: the watch
    limit was reached.
    """
    folders: dict[int, str] = {}
    secrets: list[str] = []
    checked: list[str] = []
    stack = [top]
    while stack:
        folder = stack.pop()
        wd = add_watch(folder)
        if wd < 0:
            # A folder that vanished or cannot be read has nothing to
            # watch; only the limit (or no memory for watches) fails.
            if ctypes.get_errno() in (errno.ENOSPC, errno.ENOMEM):
                return None
            continue
        folders[wd] = folder
        for entry in list_folder(folder, stack):
            if secret_name(entry.name):
                secrets.append(entry.path)
            elif checked_name(entry.name):
                checked.append(entry.path)
    return folders, secrets, checked


def _main(argv: list[str]) -> int:
    fd, mask, top, pattern, *names = argv
    # The program's own symbols include libc's (no library lookup, which
    # may start a compiler or ldconfig).
    libc = ctypes.CDLL(None, use_errno=True)
    watch_fd, watch_mask = int(fd), int(mask)
    secret = re.compile(pattern).match
    checked = frozenset(names)
    walked = walk(
        lambda folder: libc.inotify_add_watch(watch_fd, os.fsencode(folder), watch_mask),
        top,
        lambda name: secret(name.lower()) is not None,
        checked.__contains__,
    )
    if walked is None:
        return LIMIT_STATUS
    folders, secrets, to_judge = walked
    out = bytearray()
    for wd, folder in folders.items():
        out += b"w\0%d\0%s\0" % (wd, os.fsencode(folder))
    for kind, paths in ((b"s", secrets), (b"c", to_judge)):
        for path in paths:
            out += kind + b"\0" + os.fsencode(path) + b"\0"
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
