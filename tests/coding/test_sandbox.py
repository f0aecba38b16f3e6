"""The sandbox tool on real temporary git repositories: lifecycle, diff, refusals, cleanup."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import git as shared_git

from lionfactory import Branch, Tool
from lionfactory._os.process import ProcessResult, run_process
from lionfactory.coding.sandbox import SandboxRequest, SandboxResponse, sandbox_tool
from lionfactory.errors import CloneError, RegistrationError
from lionfactory.testing import assert_no_foreign_bindings

pytestmark = pytest.mark.usefixtures("hermetic_git")


def git(repo: Path, *args: str) -> str:
    """What the test's git printed, without the newline (these tests compare one-line answers)."""
    return shared_git(repo, *args).strip()


def init_repo(root: Path, *, identity: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "--quiet", "-b", "main")
    if identity:
        git(root, "config", "user.name", "Test User")
        git(root, "config", "user.email", "test@example.com")
    git(root, "config", "commit.gpgsign", "false")
    (root / "app.py").write_text("print('hello')\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    git(root, "add", "-A")
    git(root, *_identity(identity), "commit", "--quiet", "-m", "initial")
    return root


def _identity(configured: bool) -> list[str]:
    return [] if configured else ["-c", "user.name=Setup", "-c", "user.email=setup@example.com"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo")


class Recorder:
    """An on_switch callback that remembers what it was told."""

    def __init__(self) -> None:
        self.calls: list[Path | None] = []

    def __call__(self, path: Path | None) -> None:
        self.calls.append(path)


async def call(tool: Tool, action: str, **arguments: Any) -> SandboxResponse:
    return SandboxResponse.model_validate(await tool(action=action, **arguments))


async def created(
    repo: Path, recorder: Recorder | None = None, *, allow_protected: bool = True
) -> tuple[Tool, SandboxResponse]:
    # The fixture repository is on `main`; most tests are about merging as such.
    tool = sandbox_tool(
        Branch(),
        workspace_root=repo,
        on_switch=recorder,
        allow_merge_into_protected=allow_protected,
    )
    response = await call(tool, "create")
    assert response.success, response.error
    return tool, response


def worktree_of(response: SandboxResponse) -> Path:
    assert response.worktree is not None
    return Path(response.worktree)


# -- create -------------------------------------------------------------------


async def test_create_makes_a_worktree_outside_the_workspace_on_a_new_branch(repo: Path) -> None:
    recorder = Recorder()
    _, response = await created(repo, recorder)
    worktree = worktree_of(response)

    assert response.active
    assert response.branch is not None and response.branch.startswith("lionfactory/sandbox-")
    assert response.base_branch == "main"
    assert response.base_commit == git(repo, "rev-parse", "HEAD")
    assert not worktree.is_relative_to(repo)
    assert (worktree / "app.py").read_text() == "print('hello')\n"
    assert git(worktree, "branch", "--show-current") == response.branch
    assert recorder.calls == [worktree]


async def test_create_leaves_the_workspace_untouched(repo: Path) -> None:
    before = sorted(os.listdir(repo))
    await created(repo)
    assert sorted(os.listdir(repo)) == before
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--show-current") == "main"


async def test_a_file_written_in_the_sandbox_lands_in_the_worktree_only(repo: Path) -> None:
    _, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("NEW = True\n")
    assert not (repo / "new.py").exists()


async def test_create_for_a_subdirectory_workspace_switches_to_its_counterpart(
    repo: Path,
) -> None:
    recorder = Recorder()
    tool = sandbox_tool(Branch(), workspace_root=repo / "pkg", on_switch=recorder)
    response = await call(tool, "create")
    assert response.success, response.error
    assert worktree_of(response).name == "pkg"
    assert (worktree_of(response) / "mod.py").read_text() == "X = 1\n"
    assert recorder.calls == [worktree_of(response)]


async def test_create_mentions_uncommitted_workspace_changes_it_does_not_copy(
    repo: Path,
) -> None:
    (repo / "app.py").write_text("print('edited')\n")
    _, response = await created(repo)
    assert response.notice is not None and "1 uncommitted change" in response.notice
    assert (worktree_of(response) / "app.py").read_text() == "print('hello')\n"


async def test_an_async_on_switch_is_awaited(repo: Path) -> None:
    seen: list[Path | None] = []

    async def on_switch(path: Path | None) -> None:
        seen.append(path)

    tool = sandbox_tool(Branch(), workspace_root=repo, on_switch=on_switch)
    response = await call(tool, "create")
    await call(tool, "discard")
    assert seen == [worktree_of(response), None]


# -- diff ---------------------------------------------------------------------


async def test_diff_shows_modified_and_untracked_files(repo: Path) -> None:
    tool, response = await created(repo)
    worktree = worktree_of(response)
    (worktree / "app.py").write_text("print('changed')\n")
    (worktree / "notes.md").write_text("brand new\n")

    diff = await call(tool, "diff")

    assert diff.success
    assert sorted(diff.files) == ["app.py", "notes.md"]
    assert "+print('changed')" in diff.content
    assert "new file mode" in diff.content and "+brand new" in diff.content
    assert not diff.truncated


async def test_diff_stages_nothing_in_the_sandbox_or_the_workspace(repo: Path) -> None:
    tool, response = await created(repo)
    worktree = worktree_of(response)
    (worktree / "notes.md").write_text("brand new\n")
    index_before = (repo / ".git" / "index").read_bytes()

    await call(tool, "diff")

    assert git(worktree, "status", "--porcelain") == "?? notes.md"
    assert (repo / ".git" / "index").read_bytes() == index_before


async def test_diff_includes_committed_sandbox_changes(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "app.py").write_text("print('committed')\n")
    await call(tool, "commit", message="change greeting")
    diff = await call(tool, "diff")
    assert diff.files == ["app.py"]
    assert "+print('committed')" in diff.content


async def test_diff_without_changes_says_so(repo: Path) -> None:
    tool, _ = await created(repo)
    diff = await call(tool, "diff")
    assert diff.success and diff.files == []
    assert diff.content.startswith("No changes since")


async def test_a_long_diff_is_cut_with_a_notice(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "big.txt").write_text("".join(f"line {i}\n" for i in range(20_000)))

    diff = await call(tool, "diff")

    assert diff.truncated
    assert diff.notice is not None and "showing the first 50,000 characters" in diff.notice
    assert len(diff.content) < 50_000 + 500
    assert diff.content.endswith("]")
    assert diff.files == ["big.txt"]


# -- commit -------------------------------------------------------------------


@pytest.mark.parametrize("message", [None, "", "   "])
async def test_commit_needs_a_message(repo: Path, message: str | None) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("x = 1\n")
    result = await call(tool, "commit", message=message)
    assert not result.success
    assert result.error is not None and "needs a message" in result.error
    assert git(worktree_of(response), "rev-parse", "HEAD") == response.base_commit


async def test_commit_with_nothing_to_commit_fails(repo: Path) -> None:
    tool, _ = await created(repo)
    result = await call(tool, "commit", message="nothing")
    assert not result.success
    assert result.error is not None and result.error.startswith("Nothing to commit")


async def test_commit_records_all_changes_on_the_sandbox_branch(repo: Path) -> None:
    tool, response = await created(repo)
    worktree = worktree_of(response)
    (worktree / "app.py").write_text("print('bye')\n")
    (worktree / "new.py").write_text("NEW = 1\n")

    result = await call(tool, "commit", message="say bye")

    assert result.success
    assert sorted(result.files) == ["app.py", "new.py"]
    assert result.commit == git(worktree, "rev-parse", "HEAD")
    assert git(worktree, "log", "-1", "--format=%s %an") == "say bye Test User"
    assert git(repo, "rev-parse", "main") == response.base_commit


async def test_commit_without_a_configured_identity_uses_the_fallback(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "anon", identity=False)
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("NEW = 1\n")
    result = await call(tool, "commit", message="anonymous")
    assert result.success, result.error
    author = git(worktree_of(response), "log", "-1", "--format=%an <%ae>")
    assert author == "lionfactory agent <agent@localhost>"


# -- merge --------------------------------------------------------------------


async def test_merge_brings_the_changes_into_the_base_branch_and_ends_the_sandbox(
    repo: Path,
) -> None:
    recorder = Recorder()
    tool, response = await created(repo, recorder)
    worktree = worktree_of(response)
    (worktree / "feature.py").write_text("FEATURE = True\n")
    committed = await call(tool, "commit", message="add feature")

    merged = await call(tool, "merge")

    assert merged.success, merged.error
    assert not merged.active
    assert merged.branch == response.branch and merged.base_branch == "main"
    assert merged.commit == committed.commit == git(repo, "rev-parse", "main")
    assert "fast-forward" in merged.content
    assert merged.files == ["feature.py"]
    assert (repo / "feature.py").read_text() == "FEATURE = True\n"
    assert git(repo, "branch", "--show-current") == "main"
    assert git(repo, "branch", "--list", "lionfactory/*") == ""
    assert not worktree.exists()
    assert recorder.calls == [worktree, None]


@pytest.mark.parametrize("base", ["main", "master", "release", "release/2.0", "release-3"])
async def test_merge_into_a_protected_branch_is_refused_by_default(repo: Path, base: str) -> None:
    git(repo, "checkout", "--quiet", "-B", base)
    tool, response = await created(repo, allow_protected=False)
    assert response.notice is not None and f"{base!r} is a protected branch" in response.notice
    (worktree_of(response) / "feature.py").write_text("FEATURE = True\n")
    assert (await call(tool, "commit", message="add feature")).success

    merged = await call(tool, "merge")

    assert not merged.success and merged.active
    assert merged.error is not None
    assert f"Merging into {base!r} is not allowed" in merged.error
    assert "do not discard it" in merged.error and f"git merge {response.branch}" in merged.error
    assert not (repo / "feature.py").exists()
    assert git(repo, "rev-parse", base) == response.base_commit
    assert "protected branch" in tool.description
    assert (await call(tool, "discard")).success


@pytest.mark.parametrize("base", ["feature", "mainline", "my-release"])
async def test_merge_into_an_unprotected_branch_needs_no_permission(repo: Path, base: str) -> None:
    git(repo, "checkout", "--quiet", "-B", base)
    tool, response = await created(repo, allow_protected=False)
    assert response.notice is None
    (worktree_of(response) / "feature.py").write_text("FEATURE = True\n")
    await call(tool, "commit", message="add feature")
    merged = await call(tool, "merge")
    assert merged.success, merged.error
    assert (repo / "feature.py").exists()


async def test_allowing_protected_merges_drops_the_rule_from_the_description(repo: Path) -> None:
    allowed = sandbox_tool(Branch(), workspace_root=repo, allow_merge_into_protected=True)
    assert "protected branch" not in allowed.description
    with pytest.raises(TypeError, match="allow_merge_into_protected must be a bool"):
        sandbox_tool(Branch(), workspace_root=repo, allow_merge_into_protected="yes")  # type: ignore[arg-type]


async def test_merge_makes_a_merge_commit_when_the_base_moved_on(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "feature.py").write_text("FEATURE = True\n")
    await call(tool, "commit", message="add feature")
    (repo / "other.py").write_text("OTHER = 1\n")
    git(repo, "add", "other.py")
    git(repo, "commit", "--quiet", "-m", "meanwhile on main")

    merged = await call(tool, "merge", message="Merge the feature")

    assert merged.success, merged.error
    assert "merge commit" in merged.content
    assert git(repo, "log", "-1", "--format=%s") == "Merge the feature"
    assert (repo / "feature.py").exists() and (repo / "other.py").exists()


async def test_a_conflicting_merge_is_aborted_and_the_sandbox_stays(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "app.py").write_text("print('sandbox')\n")
    await call(tool, "commit", message="sandbox greeting")
    (repo / "app.py").write_text("print('main')\n")
    git(repo, "commit", "--quiet", "-am", "main greeting")
    head = git(repo, "rev-parse", "HEAD")

    merged = await call(tool, "merge")

    assert not merged.success
    assert merged.active
    assert merged.files == ["app.py"]
    assert merged.error is not None and "conflicts in app.py" in merged.error
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "app.py").read_text() == "print('main')\n"
    assert worktree_of(merged).exists()


async def test_merge_refuses_uncommitted_sandbox_changes(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("x = 1\n")
    merged = await call(tool, "merge")
    assert not merged.success and merged.active
    assert merged.error is not None and "uncommitted" in merged.error and "commit" in merged.error
    assert merged.files == ["new.py"]


async def test_merge_refuses_when_the_base_branch_changed(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("x = 1\n")
    await call(tool, "commit", message="new")
    git(repo, "switch", "--quiet", "-c", "elsewhere")

    merged = await call(tool, "merge")

    assert not merged.success and merged.active
    assert merged.error is not None and merged.error.startswith("The base branch changed")
    assert "'elsewhere'" in merged.error and "'main'" in merged.error
    assert not (repo / "new.py").exists()


async def test_merge_refuses_a_detached_head(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("x = 1\n")
    await call(tool, "commit", message="new")
    git(repo, "switch", "--quiet", "--detach")

    merged = await call(tool, "merge")

    assert not merged.success and merged.active
    assert merged.error is not None and "detached HEAD" in merged.error


async def test_merge_refuses_when_the_workspace_has_tracked_changes(repo: Path) -> None:
    tool, response = await created(repo)
    (worktree_of(response) / "new.py").write_text("x = 1\n")
    await call(tool, "commit", message="new")
    (repo / "app.py").write_text("print('user edit')\n")

    merged = await call(tool, "merge")

    assert not merged.success and merged.active
    assert merged.files == ["app.py"]
    assert (repo / "app.py").read_text() == "print('user edit')\n"


async def test_merge_without_commits_has_nothing_to_merge(repo: Path) -> None:
    tool, _ = await created(repo)
    merged = await call(tool, "merge")
    assert not merged.success and merged.active
    assert merged.error is not None and merged.error.startswith("Nothing to merge")


# -- discard ------------------------------------------------------------------


async def test_discard_removes_worktree_and_branch_and_keeps_the_workspace(repo: Path) -> None:
    recorder = Recorder()
    tool, response = await created(repo, recorder)
    worktree = worktree_of(response)
    (worktree / "app.py").write_text("print('throwaway')\n")
    await call(tool, "commit", message="throwaway")

    discarded = await call(tool, "discard")

    assert discarded.success and not discarded.active
    assert not worktree.exists()
    assert not worktree.parent.exists()  # the temporary directory around it too
    assert git(repo, "branch", "--list", "lionfactory/*") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (repo / "app.py").read_text() == "print('hello')\n"
    assert recorder.calls == [worktree, None]


async def test_a_new_sandbox_can_be_created_after_discard(repo: Path) -> None:
    tool, first = await created(repo)
    await call(tool, "discard")
    second = await call(tool, "create")
    assert second.success and second.branch != first.branch


def _starts_with(argv: Sequence[str], step: Sequence[str]) -> bool:
    """Whether the git subcommand in `argv` (past the hardening options) begins with `step`."""
    words = list(argv)
    return any(
        words[i : i + len(step)] == list(step) and words[i - 1] != "-c"
        for i in range(1, len(words))
    )


def failing_once(step: Sequence[str]) -> Any:
    """A runner that fails the first git call starting with `step`, then runs everything."""
    failed: list[bool] = []

    async def runner(argv: Sequence[str], **kwargs: Any) -> ProcessResult:
        if _starts_with(argv, step) and not failed:
            failed.append(True)
            return ProcessResult(
                argv=tuple(argv),
                returncode=128,
                stdout="",
                stderr="fatal: simulated failure",
                stdout_bytes=0,
                stderr_bytes=24,
                stdout_truncated=False,
                stderr_truncated=False,
                timed_out=False,
                pid=0,
                pgid=0,
                duration=0.0,
            )
        return await run_process(argv, **kwargs)

    return runner


@pytest.mark.parametrize("step", [("branch", "-D")])
async def test_a_failed_discard_can_be_called_again(repo: Path, step: tuple[str, ...]) -> None:
    recorder = Recorder()
    tool = sandbox_tool(
        Branch(), workspace_root=repo, on_switch=recorder, runner=failing_once(step)
    )
    response = await call(tool, "create")
    worktree = worktree_of(response)

    first = await call(tool, "discard")

    assert not first.success and first.active
    assert first.error is not None and "simulated failure" in first.error
    assert "call discard again" in first.error
    assert recorder.calls == [worktree]

    second = await call(tool, "discard")

    assert second.success, second.error
    assert not worktree.exists()
    assert git(repo, "branch", "--list", "lionfactory/*") == ""
    assert recorder.calls == [worktree, None]


async def test_a_merge_whose_cleanup_fails_is_finished_by_discard(repo: Path) -> None:
    recorder = Recorder()
    runner = failing_once(("branch", "-D"))
    tool = sandbox_tool(
        Branch(),
        workspace_root=repo,
        on_switch=recorder,
        runner=runner,
        allow_merge_into_protected=True,
    )
    response = await call(tool, "create")
    (worktree_of(response) / "feature.py").write_text("FEATURE = True\n")
    await call(tool, "commit", message="add feature")

    merged = await call(tool, "merge")

    assert merged.success and merged.active
    assert merged.notice is not None and "action='discard'" in merged.notice
    assert (repo / "feature.py").exists()
    assert recorder.calls == [worktree_of(response), None]
    again = await call(tool, "merge")
    assert not again.success and again.error is not None and "already merged" in again.error

    finished = await call(tool, "discard")

    assert finished.success and not finished.active
    assert not worktree_of(response).exists()
    assert git(repo, "branch", "--list", "lionfactory/*") == ""
    assert (repo / "feature.py").exists()


# -- refusals -----------------------------------------------------------------


async def test_create_outside_a_repository_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    recorder = Recorder()
    result = await call(sandbox_tool(Branch(), workspace_root=plain, on_switch=recorder), "create")
    assert not result.success and not result.active
    assert result.error is not None and "not inside a git repository" in result.error
    assert recorder.calls == []


async def test_a_second_create_is_refused(repo: Path) -> None:
    tool, first = await created(repo)
    second = await call(tool, "create")
    assert not second.success
    assert second.error is not None and "already active" in second.error
    assert second.branch == first.branch


async def test_create_on_a_detached_head_is_refused(repo: Path) -> None:
    git(repo, "switch", "--quiet", "--detach")
    result = await call(sandbox_tool(Branch(), workspace_root=repo), "create")
    assert not result.success
    assert result.error is not None and "detached HEAD" in result.error


async def test_create_in_a_repository_without_commits_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "--quiet", "-b", "main")
    result = await call(sandbox_tool(Branch(), workspace_root=empty), "create")
    assert not result.success
    assert result.error is not None and "no commits yet" in result.error


@pytest.mark.parametrize("action", ["diff", "commit", "merge", "discard"])
async def test_actions_without_a_sandbox_say_to_create_one(repo: Path, action: str) -> None:
    result = await call(sandbox_tool(Branch(), workspace_root=repo), action, message="m")
    assert not result.success
    assert result.error == "No sandbox is active. Create one first with action='create'."


async def test_each_factory_call_has_its_own_slot(repo: Path) -> None:
    first, _ = await created(repo)
    second = sandbox_tool(Branch(), workspace_root=repo)
    assert (await call(second, "create")).success
    await call(first, "discard")
    await call(second, "discard")


def test_the_tool_is_bound_to_its_branch(repo: Path) -> None:
    branch = Branch()
    assert sandbox_tool(branch, workspace_root=repo).bound_to == branch.id
    with pytest.raises(TypeError, match="Branch"):
        sandbox_tool(None, workspace_root=repo)  # type: ignore[arg-type]


async def test_a_registered_factory_gives_each_clone_its_own_slot(repo: Path) -> None:
    branch = Branch()
    branch.register(sandbox_tool, workspace_root=repo)
    assert (await call(branch.tools["sandbox"], "create")).success
    clone = branch.clone()
    assert_no_foreign_bindings(clone)
    assert clone.tools["sandbox"].bound_to == clone.id
    assert not (await call(clone.tools["sandbox"], "diff")).success  # no sandbox of its own yet
    assert (await call(branch.tools["sandbox"], "discard")).success


def test_a_static_sandbox_tool_is_never_shared_between_branches(repo: Path) -> None:
    owner = Branch()
    tool = sandbox_tool(owner, workspace_root=repo)
    with pytest.raises(RegistrationError, match="register its factory"):
        Branch().register(tool)
    owner.register(tool)
    with pytest.raises(CloneError, match="'sandbox'"):
        owner.clone()


def test_request_rejects_unknown_actions() -> None:
    with pytest.raises(ValueError, match="action"):
        SandboxRequest.model_validate({"action": "push"})


@pytest.mark.parametrize(("option", "value"), [("on_switch", 3), ("runner", "git")])
def test_factory_rejects_a_non_callable(repo: Path, option: str, value: object) -> None:
    with pytest.raises(TypeError, match=repr(value)):
        sandbox_tool(Branch(), workspace_root=repo, **{option: value})  # type: ignore[arg-type]


async def test_a_failing_on_switch_leaves_no_sandbox_behind(repo: Path) -> None:
    def on_switch(path: Path | None) -> None:
        raise RuntimeError("toolkit broke")

    tool = sandbox_tool(Branch(), workspace_root=repo, on_switch=on_switch)
    with pytest.raises(RuntimeError, match="toolkit broke"):
        await tool(action="create")
    assert git(repo, "branch", "--list", "lionfactory/*") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (await call(tool, "diff")).error == (
        "No sandbox is active. Create one first with action='create'."
    )
