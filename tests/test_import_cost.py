"""Importing lionfactory leaves its heavy optional dependencies unloaded.

docling, httpx, mcp and the ruff/ast-grep wrappers load only when a tool
first needs them; a plain ``import lionfactory`` (and the tools and coding
packages) must not pay for them. This is a correctness check, not a timing
one: the import *time* is reported by ``tests/benchmarks/bench_import.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    *("docling", "docling_core", "httpx", "mcp", "ruff", "ast_grep_cli", "ast_grep_py"),
    # The agent frameworks the integrations adapt to, and model provider SDKs.
    *("pydantic_ai", "agents", "openai", "langchain_core", "lionagi", "anthropic"),
)


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh interpreter (a module loaded in this one would hide nothing)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )


def test_import_loads_no_heavy_dependency() -> None:
    code = (
        "import lionfactory, lionfactory.tools, lionfactory.coding, lionfactory.integrations; "
        "import sys, json; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r})))"
    )
    proc = _fresh(code)
    assert json.loads(proc.stdout) == []


def test_the_check_sees_a_heavy_module_when_one_is_imported() -> None:
    # The same probe must be able to fail: importing httpx shows up in it.
    code = (
        "import lionfactory, httpx; import sys, json; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r})))"
    )
    proc = _fresh(code)
    assert "httpx" in json.loads(proc.stdout)


def test_a_toolkit_without_context_leaves_the_context_tool_unloaded() -> None:
    # ``mcp serve`` builds the toolkit without ``context`` (the client owns
    # the conversation): its start-up should not build that tool's models.
    code = (
        "import sys, tempfile; from lionfactory import Branch; "
        "from lionfactory.coding import coding_toolkit; "
        "b = Branch(); b.register(coding_toolkit, workspace_root=tempfile.mkdtemp(), "
        "tools=['reader', 'editor', 'bash']); "
        "print(sorted(m for m in sys.modules if m.startswith('lionfactory.tools._context')))"
    )
    proc = _fresh(code)
    assert proc.stdout.strip() == "[]"


def test_pathspec_loads_with_the_first_ignore_file_not_with_the_tools() -> None:
    # Every server imports the walking tools at start-up; pathspec (the
    # gitignore matcher) is needed only once an ignore file is read.
    code = (
        "import sys, tempfile, pathlib, trio; "
        "from lionfactory.tools import reader_tool, search_tool; "
        "root = pathlib.Path(tempfile.mkdtemp()); search_tool(workspace_root=root); "
        "tool = reader_tool(workspace_root=root); before = 'pathspec' in sys.modules; "
        "(root / '.gitignore').write_text('*.log\\n'); (root / 'a.py').write_text('x\\n'); "
        "trio.run(lambda: tool(action='list_dir', path='.')); "
        "print(before, 'pathspec' in sys.modules)"
    )
    proc = _fresh(code)
    assert proc.stdout.split() == ["False", "True"]


def test_the_editors_matcher_and_patch_parser_load_with_the_first_edit() -> None:
    # Every server builds the editor at start-up; its matcher (and difflib)
    # and its patch parser are needed only once an edit or a patch is made.
    code = (
        "import sys, tempfile, pathlib, trio; "
        "from lionfactory.tools import editor_tool; "
        "root = pathlib.Path(tempfile.mkdtemp()); (root / 'a.txt').write_text('one\\n'); "
        "tool = editor_tool(workspace_root=root); "
        "names = ('lionfactory.tools._editor_match', 'lionfactory.tools._editor_patch'); "
        "before = [n in sys.modules for n in names]; "
        "trio.run(lambda: tool(action='edit', file_path='a.txt', old_string='one', "
        "new_string='two')); "
        "print(*before, 'lionfactory.tools._editor_match' in sys.modules, "
        "(root / 'a.txt').read_text().strip())"
    )
    proc = _fresh(code)
    assert proc.stdout.split() == ["False", "False", "True", "two"]
