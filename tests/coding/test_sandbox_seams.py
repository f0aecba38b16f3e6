"""What confined bash writes inside a sandbox is untrusted input to the sandbox's own git.

Each attack plants, from a confined ``bash`` call inside an active sandbox, a
repository location or configuration that names a program (a filter, an
fsmonitor), then triggers the sandbox's git with another tool call (``diff``,
``commit``, ``merge``, ``discard``). The program would create a canary outside
the workspace and plant ``core.fsmonitor`` in the main checkout's
``.git/config``; neither ever happens, under bwrap and under Landlock.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import git, mechanism_params

from lionfactory import Branch
from lionfactory.coding import coding_toolkit

MECHANISMS = mechanism_params()


pytestmark = pytest.mark.usefixtures("hermetic_git_identity")


class Scene:
    """A repository, a canary directory beside it, and a toolkit with bash and sandbox."""

    def __init__(self, base: Path, mechanism: str) -> None:
        self.repo = base / "repo"
        self.canary = base / "canary"
        self.canary.mkdir()
        self.repo.mkdir()
        for args in (["init", "-q", "-b", "main"], ["config", "commit.gpgsign", "false"]):
            subprocess.run(["git", *args], cwd=self.repo, check=True)
        (self.repo / "app.txt").write_text("hello\n")
        subprocess.run(["git", "add", "-A"], cwd=self.repo, check=True)
        subprocess.run(["git", "commit", "-qm", "initial"], cwd=self.repo, check=True)
        self.config = (self.repo / ".git" / "config").read_bytes()
        self.branch = Branch()
        self.branch.register(
            coding_toolkit,
            workspace_root=self.repo,
            tools=["bash", "sandbox"],
            isolation=mechanism,
            notify=False,
            allow_merge_into_protected=True,
        )

    async def sh(self, script: str) -> None:
        """Run `script` through the toolkit's confined bash (as ``sh -c``)."""
        planted = await self.act("bash", command=f"sh -c {shlex.quote(script)}")
        assert planted["return_code"] == 0, planted

    async def act(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.branch.act(tool, arguments)
        assert result.ok, result.error
        out: dict[str, Any] = result.result
        return out

    def evil_repo(self, where: str) -> str:
        """Shell lines making a repository at `where` whose filter ``a=b`` writes the canary."""
        plant = f"core.fsmonitor 'touch {self.canary}/fsmonitor'"
        hit = f"touch {self.canary}/ran; git config --file {self.repo}/.git/config {plant}; cat"
        return (
            f"git init -q --bare {where} && git --git-dir={where} config core.bare false && "
            f"git --git-dir={where} config 'filter.a=b.clean' \"sh -c '{hit}'\" && "
            f"git --git-dir={where} config 'filter.a=b.smudge' \"sh -c '{hit}'\" && "
            f"git --git-dir={where} config 'filter.a=b.required' true && "
            f"git --git-dir={where} config core.fsmonitor 'touch {self.canary}/fsmonitor2' && "
            "printf '*.txt filter=a=b\\n' > .gitattributes && echo changed > app.txt"
        )

    def untouched(self, *, then_user_git: bool = True) -> None:
        assert sorted(p.name for p in self.canary.iterdir()) == []
        assert (self.repo / ".git" / "config").read_bytes() == self.config
        if not then_user_git:
            return
        # The user's own next git command runs nothing either.
        subprocess.run(["git", "status", "--porcelain"], cwd=self.repo, check=True)
        assert sorted(p.name for p in self.canary.iterdir()) == []


@pytest.fixture(params=MECHANISMS)
def scene(tmp_path: Path, request: pytest.FixtureRequest) -> Scene:
    return Scene(tmp_path, request.param)


async def _lifecycle(scene: Scene) -> list[dict[str, Any]]:
    """diff, commit, merge after the plant: each answers (typed), none runs the filter."""
    answers = [await scene.act("sandbox", action="diff")]
    answers.append(await scene.act("sandbox", action="commit", message="planted"))
    answers.append(await scene.act("sandbox", action="merge"))
    if any(a["active"] for a in answers[-1:]):
        answers.append(await scene.act("sandbox", action="discard"))
    return answers


async def test_a_rewritten_worktree_git_file_is_never_followed(scene: Scene) -> None:
    created = await scene.act("sandbox", action="create")
    assert created["success"], created["error"]
    worktree = created["worktree"]
    plant = scene.evil_repo(f"{worktree}/evil.git")
    await scene.sh(f"{plant} && printf 'gitdir: {worktree}/evil.git\\n' > .git")

    answers = await _lifecycle(scene)

    assert answers[0]["success"], answers[0]["error"]
    assert "app.txt" in answers[0]["files"]
    scene.untouched()


async def test_a_rewritten_commondir_is_never_followed(scene: Scene) -> None:
    created = await scene.act("sandbox", action="create")
    assert created["success"], created["error"]
    worktree = created["worktree"]
    admin = git(worktree, "rev-parse", "--absolute-git-dir").strip()
    plant = scene.evil_repo(f"{worktree}/evil.git")
    await scene.sh(f"{plant} && printf '{worktree}/evil.git\\n' > {admin}/commondir")

    await _lifecycle(scene)

    scene.untouched()


async def test_a_filter_named_in_the_repository_config_with_an_equals_sign_never_runs(
    scene: Scene,
) -> None:
    # The main checkout's config names the driver (as a user's might, or a
    # confined process with write access to it): its blanking must take.
    hit = f"touch {scene.canary}/ran; cat"
    for key, value in (("clean", hit), ("smudge", hit), ("required", "true")):
        git(
            scene.repo,
            "config",
            f"filter.a=b.{key}",
            f"sh -c '{value}'" if key != "required" else value,
        )
    scene.config = (scene.repo / ".git" / "config").read_bytes()
    created = await scene.act("sandbox", action="create")
    assert created["success"], created["error"]
    await scene.sh("printf '*.txt filter=a=b\\n' > .gitattributes && echo changed > app.txt")

    answers = await _lifecycle(scene)

    assert all(a["success"] for a in answers), answers
    # (The user's own git would run the filter: they configured it.)
    scene.untouched(then_user_git=False)


async def test_a_commit_lands_on_the_sandbox_branch_whatever_the_worktree_head_says(
    scene: Scene,
) -> None:
    created = await scene.act("sandbox", action="create")
    assert created["success"], created["error"]
    main_before = git(scene.repo, "rev-parse", "main")
    # The worktree's HEAD lives in its admin folder, which bash may write.
    await scene.sh("git symbolic-ref HEAD refs/heads/main && echo changed > app.txt")

    committed = await scene.act("sandbox", action="commit", message="change")

    assert committed["success"], committed["error"]
    main_after = git(scene.repo, "rev-parse", "main")
    assert main_after == main_before
    on_branch = git(scene.repo, "show", f"{created['branch']}:app.txt")
    assert on_branch == "changed\n"


async def test_a_driver_listing_too_large_to_check_is_refused_not_cut(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    canary = tmp_path / "canary"
    canary.mkdir()
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.txt").write_text("hello\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    # Over a megabyte of driver names first, the real one last: a listing cut
    # at the limit would leave it running.
    filler = "".join(f'[filter "{"x" * 200}{n}"]\n\tclean = cat\n' for n in range(6000))
    with (repo / ".git" / "config").open("a") as config:
        config.write(filler)
        config.write(f'[filter "evil"]\n\tclean = "sh -c \'touch {canary}/ran; cat\'"\n')
    (repo / ".gitattributes").write_text("*.txt filter=evil\n")
    (repo / "app.txt").write_text("changed\n")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=repo, tools=["sandbox"], notify=False)

    result = await branch.act("sandbox", {"action": "create"})

    assert result.ok, result.error
    assert result.result["success"] is False
    assert "more filter, merge and diff driver settings" in result.result["error"]
    assert list(canary.iterdir()) == []
