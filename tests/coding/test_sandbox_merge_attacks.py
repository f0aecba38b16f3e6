"""Attacks on the sandbox merge: plant a hard link, trigger with ``merge``.

The merge writes the workspace, so a merge target that is a hard link to a
protected file or to a file outside the workspace (a package cache's) must
get a file of its own, never the merged bytes written through the link; and
a command in the worktree cannot link a file from outside it into a commit.
Run under bwrap and Landlock.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _test_helpers import act, mechanism_params, sandbox_branch

from lionfactory import Branch

pytestmark = pytest.mark.usefixtures("hermetic_git")

SECRET = "SECRET=hunter2\n"


@pytest.fixture(params=mechanism_params())
def kit(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Branch, Path]:
    """A repository whose tracked ``c.txt`` holds what ``.env`` (untracked) holds."""
    files = {".env": SECRET, "c.txt": SECRET}
    return sandbox_branch(tmp_path, request.param, files, allow_merge_into_protected=True)


async def merge_a_change_to_c(branch: Branch, *plants: Path) -> None:
    """Create a sandbox, rewrite ``c.txt`` there with bash, commit and merge it.

    Each of `plants` is first linked to ``c.txt`` in the worktree, which must fail.
    """
    created = await act(branch, "sandbox", action="create")
    assert created["success"], created["error"]
    for source in plants:
        linked = await act(branch, "bash", command=f"rm -f c.txt && ln {source} c.txt")
        assert linked["return_code"] != 0, linked
    done = await act(branch, "bash", command="echo merged > c.txt")
    assert done["return_code"] == 0, done
    committed = await act(branch, "sandbox", action="commit", message="change c")
    assert committed["success"], committed["error"]
    merge = await act(branch, "sandbox", action="merge")
    assert merge["success"], merge["error"]


@pytest.mark.parametrize("twin", ["protected", "cache"])
async def test_a_merge_never_writes_through_a_hard_link(
    kit: tuple[Branch, Path], tmp_path: Path, twin: str
) -> None:
    branch, repo = kit
    if twin == "protected":
        # Planted by a command in the workspace: `c.txt` becomes `.env`
        # itself (the committed bytes, so the workspace counts as clean).
        linked = repo / ".env"
        planted = await act(branch, "bash", command="rm c.txt && ln .env c.txt")
        assert planted["return_code"] == 0, planted
    else:
        # A package cache's link (no confined command can make one out of
        # the workspace), holding the committed bytes.
        linked = tmp_path / "cache.txt"
        linked.write_text(SECRET)
        (repo / "c.txt").unlink()
        os.link(linked, repo / "c.txt")
    assert (repo / "c.txt").stat().st_ino == linked.stat().st_ino
    await merge_a_change_to_c(branch)
    assert linked.read_text() == SECRET
    assert (repo / "c.txt").read_text() == "merged\n"
    assert (repo / "c.txt").stat().st_nlink == 1
    await branch.aclose()


async def test_a_command_in_the_worktree_cannot_link_a_file_from_outside_it(
    kit: tuple[Branch, Path], tmp_path: Path
) -> None:
    branch, repo = kit
    outside = tmp_path / "outside.txt"
    outside.write_text("theirs\n")
    # bwrap: the worktree is a mount of its own (and these /tmp paths are
    # not even there, under the private /tmp; /etc/passwd is); Landlock:
    # linking out of a read-only tree needs the refer right, which only
    # writable roots have.
    await merge_a_change_to_c(branch, repo / ".env", outside, Path("/etc/passwd"))
    assert (repo / ".env").read_text() == SECRET
    assert outside.read_text() == "theirs\n"
    assert (repo / "c.txt").read_text() == "merged\n"
    await branch.aclose()
