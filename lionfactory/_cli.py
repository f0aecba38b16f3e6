"""The ``lionfactory`` command line: list the built-ins, call one, serve them over MCP.

::

    lionfactory --version
    lionfactory tools [--json] [--workspace DIR]
    lionfactory call TOOL key=value ... [--workspace DIR] [--json]
                     [--mode read_only|ask_edits|accept_edits|auto] [--rules FILE.json]
    lionfactory checkpoints list|rewind [ID] --store URL (--session NAME | --http-session ID)
                     [--scope code|conversation|both] [--path P ...] [--force P ...]
                     [--apply] [--json]
    lionfactory mcp serve [--workspace DIR] [--toolkit coding|standalone] [--tools a,b]
                          [--transport stdio|http] [--host H] [--port N] [--session-memory CHARS]
                          [--model-url URL --model NAME [--model-api-key-env VAR]]
                          [--allow-merge-into-protected]
                          [--store sqlite:///PATH|redis://HOST:PORT/DB] [--session NAME]
                          [--allow-writable-store] [--max-sessions N] [--no-resources]

Built with the standard library's argparse: three subcommands do not pay for
a dependency. ``call`` exits 0 when the tool succeeded, 1 on a typed failure
(`Tool.reports_failure`, the rule the MCP server uses for ``isError``), and 2 on
invalid input, showing the validation errors. The ``mcp`` subcommand imports
the ``mcp`` SDK only when it runs, so the rest works without the extra.

``call --mode/--rules`` applies the coding toolkit's permission rules to the
call. A call a rule asks about is put to the person at the terminal (the
question on stderr, the answer read from stdin); without a terminal it is
refused with status 1, because nobody can approve it.

Ctrl-C ends any command quietly with status 130 (128 + SIGINT, what shells
report for an interrupted program): an interrupt is the user's decision, not
an error, and inside trio it surfaces as a nested exception group whose
traceback tells the user nothing. Likewise a reader that goes away
(``lionfactory call reader ... | head -1``) ends the command quietly with
status 141 (128 + SIGPIPE, what a shell reports for ``cat`` there), not a
traceback and not the status of a failed tool.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from lionfactory import __version__
from lionfactory._acting import error_payload
from lionfactory._approvals import Approval, approving
from lionfactory._catalogue import CATALOGUE, WORKSPACE_TOOLS, BuiltinTool, workspace_factory
from lionfactory._tool import Tool
from lionfactory.errors import (
    ApprovalRequired,
    ConfigurationError,
    ToolError,
    ToolFailure,
    ToolInputError,
)

__all__ = [
    "BUILTIN_TOOLS",
    "ask_on_terminal",
    "build_parser",
    "builtin_factories",
    "builtin_tool",
    "cli_factories",
    "main",
    "parse_assignments",
]

BUILTIN_TOOLS: tuple[str, ...] = WORKSPACE_TOOLS
"""The built-ins the command line lists and calls: those that need only a workspace."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for ``cat big | head -1``'s ``cat``."""


def builtin_tool(name: str, workspace: Path | None, **options: Any) -> Tool:
    """Build the standalone built-in `name` for `workspace` (imports lazily).

    `options` are further factory options (``bash``'s ``shell``, ``isolation``).

    Raises:
        KeyError: `name` is not one of `BUILTIN_TOOLS`.
    """
    factory = builtin_factories()[name]
    return factory(workspace_root=workspace, **options)


def builtin_factories() -> dict[str, Callable[..., Tool]]:
    """The factories of `BUILTIN_TOOLS`, by name (each tool module imported now)."""
    return {name: workspace_factory(name) for name in BUILTIN_TOOLS}


def _accepts_only_text(schema: Mapping[str, Any]) -> bool:
    """Whether a property schema takes a string and nothing JSON could turn it into."""
    if schema.get("type") == "string":
        return True
    options = schema.get("anyOf")
    if isinstance(options, list):
        types = {o.get("type") for o in options if isinstance(o, Mapping)}
        return "string" in types and types <= {"string", "null"}
    return False


def parse_assignments(
    items: Sequence[str], properties: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Turn ``key=value`` words, or one JSON object, into tool arguments.

    A value is parsed as JSON when it parses (``10``, ``true``, ``null``,
    ``["a", "b"]``, ``{"k": 1}``), else it is the plain string. A property
    whose schema accepts only a string keeps the text as typed, so
    ``path=2024`` stays ``"2024"`` and ``content=true`` stays ``"true"``.

    A single word that starts with ``{`` is the call's arguments as one
    JSON object, exactly as a model sends them (a call copied from a log
    or a transcript); no ``key=value`` word starts with ``{``, since a key
    is a field name.

    Args:
        items: the words, each ``key=value`` (the value may be empty), or
            one JSON object.
        properties: the tool's ``inputSchema["properties"]``, if known.

    Raises:
        ValueError: a word has no ``=``, an empty key, or repeats a key; a
            JSON object that does not parse, or is not an object.
    """
    if len(items) == 1 and items[0].lstrip().startswith("{"):
        return _json_arguments(items[0])
    properties = properties or {}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(
                f"arguments are key=value words or one JSON object, got {item!r}"
                + (" (a JSON object is the only argument)" if item.lstrip()[:1] == "{" else "")
            )
        if key in out:
            raise ValueError(f"argument {key!r} given twice")
        schema = properties.get(key)
        if isinstance(schema, Mapping) and _accepts_only_text(schema):
            out[key] = text
            continue
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


def _json_arguments(text: str) -> dict[str, Any]:
    """The call's arguments given as one JSON object word (see `parse_assignments`)."""
    try:
        arguments = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise ValueError(f"the arguments are not a valid JSON object: {exc}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments must be one JSON object, got {type(arguments).__name__}")
    return arguments


def cli_factories(
    toolkit: Literal["coding", "standalone"],
    names: Sequence[str] | None,
    workspace: Path | None,
    *,
    allow_merge_into_protected: bool = False,
) -> list[tuple[Callable[..., Any], dict[str, Any]]]:
    """The factories ``lionfactory mcp serve`` serves.

    ``coding`` serves `coding_toolkit` (default tools: its defaults without
    ``context``: the MCP client owns the conversation, and the session's
    branch holds only the tool calls); ``standalone`` serves the plain
    built-ins, without the read-before-edit guard.

    Raises:
        ValueError: an unknown tool name (the message lists the valid ones),
            or `allow_merge_into_protected` without the coding toolkit.
    """
    root = (workspace or Path.cwd()).resolve()
    if toolkit == "coding":
        from lionfactory.coding import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit

        chosen = [n for n in DEFAULT_CODING_TOOLS if n != "context"] if names is None else names
        unknown = [n for n in chosen if n not in ALL_CODING_TOOLS]
        if unknown:
            raise ValueError(
                f"unknown coding tool(s) {unknown}; valid names: {', '.join(ALL_CODING_TOOLS)}"
            )
        kwargs: dict[str, Any] = {"workspace_root": root, "tools": list(chosen)}
        if allow_merge_into_protected:
            kwargs["allow_merge_into_protected"] = True
        return [(coding_toolkit, kwargs)]
    if allow_merge_into_protected:
        raise ValueError("--allow-merge-into-protected is for the coding toolkit's sandbox")
    chosen = list(BUILTIN_TOOLS) if names is None else list(names)
    unknown = [n for n in chosen if n not in BUILTIN_TOOLS]
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; valid names: {', '.join(BUILTIN_TOOLS)}")
    factories = builtin_factories()
    return [(factories[n], {"workspace_root": root}) for n in chosen]


def served_tools_text() -> str:
    """What ``mcp serve`` serves, by name, for its help (imports the coding toolkit)."""
    from lionfactory.coding import ALL_CODING_TOOLS

    coding = [name for _, kwargs in cli_factories("coding", None, None) for name in kwargs["tools"]]
    # jobs comes with bash, right after it.
    shown = [name for n in coding for name in ((n, "jobs") if n == "bash" else (n,))]
    opt_in = [n for n in ALL_CODING_TOOLS if n not in coding]
    return (
        f"Served tools: with --toolkit coding (the default): {', '.join(shown)}; more with "
        f"--tools: {', '.join(opt_in)}. With --toolkit standalone: {', '.join(BUILTIN_TOOLS)}."
    )


class _ServeParser(argparse.ArgumentParser):
    """The ``mcp serve`` parser: its help names the served tools.

    Computed when the help is shown, not when the parser is built, so every
    other command line does not import the coding toolkit for it.
    """

    def format_help(self) -> str:
        if self.prog.endswith(" serve") and self.epilog is None:
            self.epilog = served_tools_text()
        return super().format_help()


def _add_workspace(command: argparse.ArgumentParser) -> None:
    """Give `command` the ``--workspace`` option (``tools``, ``call`` and ``mcp serve`` take it)."""
    command.add_argument("--workspace", type=Path, default=None, help="workspace root (default: .)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lionfactory`` command."""
    parser = argparse.ArgumentParser(
        prog="lionfactory",
        description="Built-in tools for LLM agents: list them, call one, or serve them over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"lionfactory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tools = commands.add_parser("tools", help="list the built-in tools and their schemas")
    tools.add_argument("--json", action="store_true", help="print the MCP-style schemas as JSON")
    _add_workspace(tools)

    call = commands.add_parser(
        "call",
        help="run one tool call and print its response",
        description=(
            "Run one call of a built-in tool. Arguments are key=value words; values that parse "
            "as JSON (numbers, true/false, null, lists, objects) are passed as JSON, others as "
            "text, and a field that only takes text always gets the text. One JSON object "
            'instead (\'{"path": "a.py"}\') is the arguments as a model sends them. Exit '
            "status: 0 on success, 1 when the tool reports a failure, 2 on invalid input."
        ),
    )
    call.add_argument("tool", metavar="TOOL", help=f"one of: {', '.join(BUILTIN_TOOLS)}")
    call.add_argument(
        "arguments",
        nargs="*",
        metavar="KEY=VALUE",
        help="the tool's arguments (or one JSON object)",
    )
    _add_workspace(call)
    call.add_argument("--json", action="store_true", help="print the whole response as JSON")
    call.add_argument(
        "--shell",
        action="store_true",
        help="bash only: run the command as a shell script (pipes, &&, redirects) even "
        "without kernel isolation, as bash_tool(shell=True) does",
    )
    call.add_argument(
        "--isolation",
        default=None,
        choices=("none", "auto", "bwrap", "landlock"),
        help="bash only: confine the command in the kernel (writes only in the workspace, "
        "no network); with it, the command is a shell script (default: none)",
    )
    call.add_argument(
        "--mode",
        default=None,
        choices=("read_only", "ask_edits", "accept_edits", "auto"),
        help="a permission preset of the coding toolkit's rules",
    )
    call.add_argument(
        "--rules",
        type=Path,
        default=None,
        metavar="FILE",
        help="a JSON list of rules ({tool, match, decision, reason, examples, ...})",
    )

    checkpoints = commands.add_parser(
        "checkpoints",
        help="list or rewind the checkpoints of a session stored by `mcp serve --store`",
        description=(
            "List the checkpoints of an MCP session kept in a --store, or rewind its files "
            "and/or conversation to one. A rewind is a dry run that reports what it would "
            "restore, delete and leave as a conflict, unless --apply is given; an applied "
            "rewind saves the session back, and its report names the checkpoint that undoes it."
        ),
    )
    checkpoints.add_argument("action", choices=("list", "rewind"))
    checkpoints.add_argument(
        "checkpoint", nargs="?", default=None, help="rewind: the checkpoint id (from list)"
    )
    checkpoints.add_argument(
        "--store", required=True, metavar="URL", help="the server's --store URL"
    )
    checkpoints.add_argument(
        "--session",
        default=None,
        metavar="NAME",
        help="the stdio session's name (what the server printed, or its --session)",
    )
    checkpoints.add_argument(
        "--http-session", default=None, metavar="ID", help="an HTTP session's id instead"
    )
    checkpoints.add_argument(
        "--scope", choices=("code", "conversation", "both"), default="both", help="rewind only"
    )
    checkpoints.add_argument(
        "--path", action="append", default=None, metavar="PATH", help="rewind only these paths"
    )
    checkpoints.add_argument(
        "--force", action="append", default=[], metavar="PATH", help="restore this conflict too"
    )
    checkpoints.add_argument(
        "--apply", action="store_true", help="rewind for real (the default is a dry run)"
    )
    checkpoints.add_argument("--json", action="store_true", help="print JSON")

    mcp = commands.add_parser("mcp", help="Model Context Protocol server (needs the mcp extra)")
    mcp_commands = mcp.add_subparsers(
        dest="mcp_command", required=True, metavar="COMMAND", parser_class=_ServeParser
    )
    serve = mcp_commands.add_parser(
        "serve",
        help="serve the tools over MCP",
        description=(
            "Serve the coding toolkit (or a chosen set of tools) over MCP. Every client session "
            "gets its own branch, so read-before-edit evidence never crosses sessions."
        ),
    )
    _add_workspace(serve)
    serve.add_argument(
        "--toolkit",
        choices=("coding", "standalone"),
        default="coding",
        help="'coding' (default): the coding toolkit with its read-before-edit guard; "
        "'standalone': the plain built-ins, no guard",
    )
    serve.add_argument(
        "--tools",
        default=None,
        help="comma-separated tool names (default: the toolkit's defaults, or every built-in)",
    )
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="http only (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8000, help="http only; 0 picks a free port (default: 8000)"
    )
    serve.add_argument("--name", default="lionfactory", help="the server name clients see")
    serve.add_argument(
        "--allow-merge-into-protected",
        action="store_true",
        help="let the sandbox merge into main, master or release* (refused by default)",
    )
    serve.add_argument(
        "--model-url",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible API root (e.g. http://127.0.0.1:8080/v1): the chat model "
        "of each session's branch, which the subagent tool needs (needs the models extra)",
    )
    serve.add_argument(
        "--model", default=None, metavar="NAME", help="the model name at --model-url"
    )
    serve.add_argument(
        "--model-api-key-env",
        default=None,
        metavar="VAR",
        help="the environment variable holding the API key for --model-url (a key on the "
        "command line would show in the process list)",
    )
    serve.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="keep every session's branch (conversation and read evidence) in a store, saved "
        "after each tool call, so sessions survive a restart: sqlite:///path.db (one machine) "
        "or redis://host:port/db (shared by several servers). A sqlite file the served tools "
        "could write (inside the workspace or the served bash's writable roots) is refused",
    )
    serve.add_argument(
        "--allow-writable-store",
        action="store_true",
        help="serve with a --store the served tools could write (inside the workspace, or "
        "where the served bash may write): a warning instead of a refusal. Whoever writes "
        "the store can forge sessions",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=None,
        metavar="N",
        help="live sessions kept; one more closes the least recently used idle session and "
        "what it holds (over HTTP, openings past N are refused with 503; default: 1000)",
    )
    serve.add_argument(
        "--session",
        default=None,
        metavar="NAME",
        help="stdio with --store: the name the connection's session is stored under; a server "
        "started again with the same store and name resumes it (default: a random name per "
        "start, printed on stderr)",
    )
    serve.add_argument(
        "--no-resources",
        action="store_true",
        help="do not serve the workspace's files as MCP resources (by default they are listed "
        "through the project's ignore rules, without .git or protected names, and readable)",
    )
    serve.add_argument(
        "--session-memory",
        type=int,
        default=None,
        metavar="CHARS",
        help="characters of tool results a session keeps before its oldest are compacted "
        "(read-before-edit evidence is kept; default: 4,000,000)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, collector_paused: bool = False) -> int:
    """Run the command line and return its exit status (130 after Ctrl-C).

    Args:
        argv: the arguments (default: the process's).
        collector_paused: the caller (``python -m lionfactory``) turned the
            cyclic garbage collector off while the command loads; it is
            turned on again once the command is ready to work.
    """
    try:
        return _main(argv, collector_paused)
    except BaseException as exc:
        if _holds(exc, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if _holds(exc, BrokenPipeError):
            _discard_output()
            return EXIT_BROKEN_PIPE
        raise


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether `exc` is a `kind`, alone or inside (nested) exception groups."""
    if isinstance(exc, kind):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(kind) is not None


def _discard_output() -> None:
    """After the reader of stdout went away (``| head -1``): end quietly, as Unix tools do.

    The rest of the output has nobody to go to. Pointing the descriptors at
    /dev/null makes the interpreter's last flush of the buffered text
    succeed, instead of printing a second ``BrokenPipeError`` at exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):  # replaced or closed by the caller: leave it
                continue
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None, collector_paused: bool = False) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if collector_paused and args.command != "mcp":
        gc.enable()  # a server turns it on when it is ready (`_serving`)
    if args.command == "checkpoints":
        return _checkpoints(args)
    workspace: Path | None = args.workspace
    if workspace is not None and not workspace.is_dir():
        print(
            f"lionfactory: --workspace must be a directory, got {str(workspace)!r}", file=sys.stderr
        )
        return EXIT_USAGE
    if args.command == "tools":
        return _list_tools(workspace, as_json=args.json, out=sys.stdout)
    if args.command == "call":
        try:
            hook = _rules_hook(args.mode, args.rules, workspace)
        except (OSError, ValueError, TypeError) as exc:
            print(f"lionfactory: --rules/--mode: {exc}", file=sys.stderr)
            return EXIT_USAGE
        options: dict[str, Any] = {}
        if args.shell:
            options["shell"] = True
        if args.isolation is not None:
            options["isolation"] = args.isolation
        if options and args.tool != "bash":
            print("lionfactory: --shell and --isolation are options of bash", file=sys.stderr)
            return EXIT_USAGE
        return _call(
            args.tool, args.arguments, workspace, as_json=args.json, rules=hook, options=options
        )
    return _serve(args, workspace, collector_paused)


def _list_tools(workspace: Path | None, *, as_json: bool, out: TextIO) -> int:
    tools = [builtin_tool(name, workspace) for name in BUILTIN_TOOLS]
    if as_json:
        json.dump([t.schema("mcp") for t in tools], out, indent=2, ensure_ascii=False)
        out.write("\n")
        return EXIT_OK
    width = max(len(row.name) for row in CATALOGUE)
    for tool in tools:
        out.write(f"{tool.name:<{width}}  {_summary(tool.description)}\n")
    out.write(
        "\nThe other built-ins, built in Python (`call` and `mcp serve --toolkit standalone` "
        "serve the tools above):\n"
    )
    for row in CATALOGUE:
        if row.name not in BUILTIN_TOOLS:
            out.write(f"{row.name:<{width}}  {row.factory} ({_needs(row)})\n")
    out.write(f"\n{_isolation_line(workspace)}\n")
    out.write("\nRun `lionfactory tools --json` for the full descriptions and schemas.\n")
    return EXIT_OK


def _needs(row: BuiltinTool) -> str:
    """What building `row` takes, and whether the coding toolkit builds it."""
    articles = {"branch": "a branch", "exchange": "an exchange", "workspace": "a workspace"}
    wants = [said for need, said in articles.items() if need in row.needs]
    said = f"needs {', '.join(wants)}" if wants else "needs nothing"
    coding = {
        "default": "coding toolkit: by default",
        "opt-in": "coding toolkit: when named in tools=",
        "with bash": "coding toolkit: with bash",
    }.get(row.coding)
    return f"{said}; {coding}" if coding else said


def _isolation_line(workspace: Path | None) -> str:
    """What the coding toolkit's default ``isolation="auto"`` chooses on this machine."""
    from lionfactory._os.isolation import workspace_isolation

    chosen = workspace_isolation("auto", (workspace or Path.cwd()).resolve())
    return (
        f"Process isolation of the coding toolkit (and `mcp serve --toolkit coding`): "
        f"{chosen.describe()}. The standalone tools above run unconfined unless built "
        f"with isolation=..."
    )


def _summary(description: str, limit: int = 100) -> str:
    """The first sentence of a description on one line, cut at a word near `limit`."""
    paragraph = " ".join(description.strip().split("\n\n")[0].split())
    sentence = re.match(r"(.+?)[.:](?:\s|$)", paragraph)
    text = sentence.group(1) if sentence else paragraph
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."


def _rules_hook(mode: str | None, rules_file: Path | None, workspace: Path | None) -> Any:
    """The rule hook of ``--mode``/``--rules``, or None (every rule is checked now).

    Raises:
        OSError: the rules file cannot be read.
        ValueError, TypeError: it is not a JSON list of valid rules.
    """
    if mode is None and rules_file is None:
        return None
    from lionfactory.coding.rules import RuleHook, hinted_rules, rule_set

    rules = None
    if rules_file is not None:
        loaded = json.loads(rules_file.read_text(encoding="utf-8"))
        if not isinstance(loaded, list):
            raise ValueError(f"{rules_file} must hold a JSON list of rules")
        rules = loaded
    # The mode judges every tool `call` can build by the tool's own hints.
    hinted = hinted_rules(mode, (builtin_tool(n, workspace) for n in BUILTIN_TOOLS)) if mode else ()
    return RuleHook((*rule_set(mode, rules), *hinted), (workspace or Path.cwd()).resolve())


def ask_on_terminal(asked: ApprovalRequired, arguments: Mapping[str, Any]) -> bool:
    """Ask the person at the terminal whether to run a held call; False without a terminal."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        print(
            f"lionfactory: {asked} (rule or hook: {asked.hook or 'unnamed'}); nobody can approve "
            f"it here: run the command in a terminal to be asked, or change the rules",
            file=sys.stderr,
        )
        return False
    shown = json.dumps(dict(arguments), ensure_ascii=False)
    sys.stderr.write(f"{asked}\n  arguments: {shown[:2000]}\nRun it? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _call(
    name: str,
    words: Sequence[str],
    workspace: Path | None,
    *,
    as_json: bool,
    rules: Any = None,
    options: Mapping[str, Any] | None = None,
) -> int:
    if name not in BUILTIN_TOOLS:
        print(
            f"lionfactory: unknown tool {name!r}; choose one of: {', '.join(BUILTIN_TOOLS)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        tool = builtin_tool(name, workspace, **(options or {}))
    except ConfigurationError as exc:  # a mechanism this machine does not have
        print(f"lionfactory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        arguments = parse_assignments(words, tool.schema("mcp")["inputSchema"]["properties"])
    except ValueError as exc:
        print(f"lionfactory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if rules is not None:
        tool = tool.with_hooks(pre=[rules])
    try:
        try:
            result = tool.run_sync(**arguments)
        except ApprovalRequired as asked:
            if not ask_on_terminal(asked, arguments):
                print("lionfactory: not run", file=sys.stderr)
                return EXIT_FAILED
            # The person on the terminal approved this call, with these
            # arguments, and nothing it leads to.
            with approving(Approval(None, "", tool.name, dict(arguments))):
                result = tool.run_sync(**arguments)
    except ToolInputError as exc:
        if as_json:
            payload = error_payload(exc.message, exc)
            print(json.dumps(payload, indent=2, ensure_ascii=False))
        print(exc.message, file=sys.stderr)
        return EXIT_USAGE
    except ToolError as exc:
        print(f"lionfactory: {exc}", file=sys.stderr)
        return EXIT_FAILED
    failed = tool.reports_failure(result)
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_result(result)
    if result.get("job_id") is not None and result.get("return_code") is None:
        # Nothing a call started outlives its process (the exit hooks end it).
        print(
            "lionfactory: the background job ends when this command does; to keep jobs "
            "across calls, serve the tools (lionfactory mcp serve --toolkit standalone)",
            file=sys.stderr,
        )
    return EXIT_FAILED if failed else EXIT_OK


def _serve_model(args: argparse.Namespace) -> Any:
    """The chat model ``mcp serve`` gives each session, or None when none is configured.

    Raises:
        ValueError: only one of --model-url and --model, or an unset key variable.
        ImportError: the models extra (httpx) is not installed.
    """
    if args.model_url is None and args.model is None:
        if args.model_api_key_env is not None:
            raise ValueError("--model-api-key-env needs --model-url and --model")
        return None
    if args.model_url is None or args.model is None:
        raise ValueError("give --model-url and --model together")
    api_key = None
    if args.model_api_key_env is not None:
        api_key = os.environ.get(args.model_api_key_env)
        if not api_key:
            raise ValueError(
                f"--model-api-key-env names {args.model_api_key_env!r}, which is not set"
            )
    try:
        from lionfactory.models import OpenAICompatible
    except ImportError as exc:
        raise ImportError(
            f"--model-url needs the models extra: pip install 'lionfactory[models]' ({exc})"
        ) from None
    return OpenAICompatible(args.model_url, args.model, api_key=api_key)


def _print_result(result: Mapping[str, Any]) -> None:
    """A human rendering: the text a tool produced, else the response as JSON."""
    content = result.get("content")
    if isinstance(content, str) and content:
        print(content)
    elif "stdout" in result:
        sys.stdout.write(result.get("stdout") or "")
        sys.stderr.write(result.get("stderr") or "")
    elif not result.get("error"):
        print(json.dumps(result, indent=2, ensure_ascii=False))
    for key in ("error", "notice", "system"):
        value = result.get(key)
        if value:
            print(f"{key}: {value}", file=sys.stderr)


def _printable(text: str) -> str:
    """`text` for a terminal: control characters escaped.

    A stored session is data another program (or a confined command naming a
    file) wrote; a file name holding an escape sequence must not drive the
    user's terminal when the text report prints it.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _checkpoints(args: argparse.Namespace) -> int:
    """``lionfactory checkpoints list|rewind``: a stored session's checkpoints.

    The session's branch is loaded from the store (its toolkit is rebuilt,
    so its rewinder is there), rewound, and, for an applied rewind, saved
    back: a server that serves the session next loads the rewound branch. A
    save that meets a newer version (the session made a call meanwhile)
    is refused with status 1 and nothing of the rewind is stored; the files
    it restored stay restored, and its ``undo`` is printed.
    """
    import anyio

    if (args.session is None) == (args.http_session is None):
        print("lionfactory: name the session with --session or --http-session", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "rewind" and not args.checkpoint:
        print("lionfactory: rewind needs a checkpoint id (see `list`)", file=sys.stderr)
        return EXIT_USAGE
    try:
        store = _open_store(args.store)
    except (OSError, ValueError) as exc:
        print(f"lionfactory: cannot use the store {args.store!r}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return anyio.run(_checkpoints_in, args, store, backend="trio")


async def _checkpoints_in(args: argparse.Namespace, store: Any) -> int:
    from lionfactory.errors import CheckpointNotFound, ConflictError
    from lionfactory.mcp._stored_sessions import TRANSPORT_KEY, session_branch_id

    transport: Literal["stdio", "http"] = "stdio" if args.session is not None else "http"
    name = args.session if args.session is not None else args.http_session
    branch_id = session_branch_id(name, transport)
    async with store:
        if not await store.version(branch_id):
            print(f"lionfactory: the store holds no {transport} session {name!r}", file=sys.stderr)
            return EXIT_FAILED
        branch = await store.load(branch_id)
        if branch.metadata.get(TRANSPORT_KEY) != transport:
            print(f"lionfactory: {branch_id} is not a stored {transport} session", file=sys.stderr)
            return EXIT_FAILED
        try:
            if args.action == "list":
                rows = [
                    {
                        "id": e.checkpoint.id,
                        "tool": e.checkpoint.tool,
                        "created_at": e.checkpoint.created_at.isoformat(timespec="seconds"),
                        "files_changed": list(e.checkpoint.files_changed),
                        **({"partial": e.data["partial"]} if e.data.get("partial") else {}),
                    }
                    for e in branch.checkpoint_log.entries
                ]
                if args.json:
                    print(json.dumps(rows, indent=2))
                else:
                    for row in rows:
                        files = ", ".join(map(_printable, row["files_changed"])) or "-"
                        note = f"  (partial: {row['partial']})" if "partial" in row else ""
                        line = f"{row['id']}  {row['created_at']}  {row['tool']:<8} {files}{note}"
                        print(_printable(line))
                    if not rows:
                        print("no checkpoints")
                return EXIT_OK
            try:
                report = await branch.rewind(
                    args.checkpoint,
                    scope=args.scope,
                    paths=args.path,
                    dry_run=not args.apply,
                    force=args.force,
                )
            except CheckpointNotFound as exc:
                print(f"lionfactory: {exc}", file=sys.stderr)
                return EXIT_FAILED
            except ToolFailure as exc:  # a snapshot or restore failed: its message says why
                print(f"lionfactory: {exc}", file=sys.stderr)
                return EXIT_FAILED
            result = {
                "dry_run": not args.apply,
                "restored": list(report.restored),
                "deleted": list(report.deleted),
                "conflicts": list(report.conflicts),
                "skipped": list(report.skipped),
                "undo": report.undo,
            }
            saved = True
            if args.apply:
                try:
                    await store.save(branch)
                except ConflictError:
                    saved = False
            if args.json:
                print(json.dumps({**result, "saved": saved}, indent=2))
            else:
                head = "would be " if not args.apply else ""
                print(f"{'dry run: ' if not args.apply else ''}rewind to {args.checkpoint}")
                for key in ("restored", "deleted", "conflicts", "skipped"):
                    items = result[key]
                    label = f"{head}{key}" if key in ("restored", "deleted") else key
                    shown = ", ".join(map(_printable, items)) if items else "-"
                    print(f"  {label}: {shown}")
                if args.apply:
                    print(f"  undo: lionfactory checkpoints rewind {report.undo} --apply ...")
                else:
                    print("  nothing changed; run again with --apply to rewind")
            if not saved:
                print(
                    "lionfactory: the session changed while rewinding; the files were rewound "
                    f"but the session was not saved (undo: {report.undo})",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            return EXIT_OK
        finally:
            await branch.aclose()


def _open_store(url: str) -> Any:
    """The store of ``--store``, checked once so a bad URL fails before serving."""
    import anyio

    from lionfactory.backends import open_store

    store = open_store(url)
    try:
        anyio.run(store.version, uuid.UUID(int=0), backend="trio")
    except Exception as exc:
        # sqlite3 and redis-py raise their own error types; one message for all.
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    return store


_PROCESS_TOOLS = ("bash", "sandbox")
"""Served tools that start programs: they write wherever their confinement lets them."""


def _check_store_location(
    url: str, root: Path, tools: Sequence[str], mechanism: str, *, allow: bool
) -> None:
    """Refuse a ``--store`` file the served agent could write (or warn, with `allow`).

    Whoever writes the store can forge sessions (a session's branch grants
    its read-before-edit evidence). The file tools write inside the
    workspace; ``bash`` and the sandbox's git write inside their
    confinement's writable roots, or anywhere the user may when no
    mechanism confines them. A redis store is no file here and is not
    checked.

    Args:
        url: the ``--store`` URL.
        root: the served workspace.
        tools: the served tool names.
        mechanism: the isolation the served bash is built with.
        allow: warn instead of refusing.

    Raises:
        ValueError: the store's file lies where a served tool may write,
            and `allow` is false.
    """
    if not url.startswith("sqlite:///"):
        return
    from lionfactory._os.isolation import workspace_isolation

    path = Path(os.path.realpath(Path(url.removeprefix("sqlite:///")).expanduser()))
    real_root = Path(os.path.realpath(root))
    problems: list[str] = []
    if path == real_root or real_root in path.parents:
        problems.append(f"it is inside the served workspace {real_root}")
    elif any(n in _PROCESS_TOOLS for n in tools):
        isolation = workspace_isolation(mechanism, real_root)
        if not isolation.confined:
            problems.append(
                "the served bash runs unconfined (no isolation mechanism), so it can write "
                "anywhere this user can"
            )
        for writable in (*isolation.policy.writable, *isolation.policy.git_writable):
            real = Path(os.path.realpath(writable))
            if isolation.confined and (path == real or real in path.parents):
                problems.append(f"the served bash may write {real}")
    if not problems:
        return
    text = (
        f"the store {path} can be written by the served agent ({'; '.join(problems)}), and "
        f"whoever writes the store can forge sessions. Put it outside the workspace and the "
        f"served bash's writable roots, e.g. --store "
        f"sqlite:///$HOME/.local/state/lionfactory/sessions.db"
    )
    if not allow:
        raise ValueError(f"{text}, or pass --allow-writable-store to serve anyway")
    print(f"lionfactory: warning: {text}", file=sys.stderr)


def _stream_session(args: argparse.Namespace, store: Any) -> str | None:
    """The stdio session's name: the user's, or a random one the user is told about.

    Raises:
        ValueError: a name that cannot name a session.
    """
    if store is None or args.transport != "stdio":
        return None
    from lionfactory.mcp._stored_sessions import check_session_name, new_session_name

    if args.session is not None:
        return check_session_name(args.session)
    name = new_session_name()
    print(
        f"lionfactory: this stdio session is stored as {name}; "
        f"start the server with --session {name} to resume it",
        file=sys.stderr,
        flush=True,
    )
    return name


def _load_served_modules(factories: Sequence[tuple[Callable[..., Any], dict[str, Any]]]) -> None:
    """Import the served workspace tools' modules now, before the toolkit is built.

    The coding toolkit resolves its isolation first, and a confined
    isolation starts walking the toolchain trees in a daemon thread (about
    0.8 s of CPU here); the tools' modules, imported after that by the build,
    then shared the interpreter with the walk and took several times as
    long, all of it before ``initialize`` is answered. Imported first, they
    load at full speed, and the build that starts the walk is the last step.
    """
    for _, kwargs in factories:
        for name in kwargs.get("tools", ()):
            if name in WORKSPACE_TOOLS:
                workspace_factory(name)


def _answer_initialize(args: argparse.Namespace) -> Any:
    """Over stdio, answer an ``initialize`` already waiting, before the served tools load.

    The reply needs only the server's name and whether it serves resources;
    what came after it here (the coding toolkit's import to check the tool
    names, the served tools' modules, trio, the toolkit's build) took
    longer than the whole start of the Node reference server (see
    `lionfactory.mcp._stdio.answer_initialize`). A usage error found after
    it ends the server after the handshake, with the same message and status.
    """
    if args.transport != "stdio":
        return None
    from lionfactory.mcp._protocol import resource_capability
    from lionfactory.mcp._stdio import answer_initialize, server_info

    resources = None if args.no_resources else resource_capability(watched=True)
    return answer_initialize(server_info(args.name, __version__, None, resources))


def _serve(args: argparse.Namespace, workspace: Path | None, collector_paused: bool) -> int:
    try:
        from lionfactory.mcp import serve_mcp
        from lionfactory.mcp._serve import check_serve_options
    except ImportError as exc:
        print(f"lionfactory: {exc}", file=sys.stderr)
        return EXIT_FAILED
    names = None if args.tools is None else [n.strip() for n in args.tools.split(",") if n.strip()]
    memory = {} if args.session_memory is None else {"session_memory_budget": args.session_memory}
    try:
        check_serve_options(args.transport, args.host, args.port)
        handshake = _answer_initialize(args)
        factories = cli_factories(
            args.toolkit,
            names,
            workspace,
            allow_merge_into_protected=args.allow_merge_into_protected,
        )
        chat_model = _serve_model(args)
        if chat_model is None and "subagent" in (names or ()):
            raise ValueError(
                "the subagent tool runs a second conversation with a chat model, and none is "
                "configured. Give one with --model-url URL --model NAME (an OpenAI-compatible "
                "server), or leave subagent out of --tools."
            )
        if args.session_memory is not None and args.session_memory < 1:
            raise ValueError(f"--session-memory must be at least 1, got {args.session_memory}")
        if args.max_sessions is not None and args.max_sessions < 1:
            raise ValueError(f"--max-sessions must be at least 1, got {args.max_sessions}")
        if args.max_sessions is not None:
            memory["max_sessions"] = args.max_sessions
        if args.store is not None:
            coding = args.toolkit == "coding"
            _check_store_location(
                args.store,
                (workspace or Path.cwd()).resolve(),
                factories[0][1]["tools"] if coding else (names or list(BUILTIN_TOOLS)),
                # The mechanism each toolkit's bash gets by default.
                "auto" if coding else "none",
                allow=args.allow_writable_store,
            )
        store = None if args.store is None else _open_store(args.store)
        session = _stream_session(args, store)
        _load_served_modules(factories)
    except (ValueError, TypeError) as exc:
        print(f"lionfactory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ImportError) as exc:
        if args.store is None:
            print(f"lionfactory: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"lionfactory: cannot use the store {args.store!r}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    source: Any = factories
    resources: dict[str, Any] = {}
    if chat_model is not None:
        # A template branch carries the model; each session gets a clone of it,
        # and a session restored from the store gets the same model back.
        from lionfactory._branch import Branch

        source = Branch(name="mcp-session", chat_model=chat_model)
        for factory, kwargs in factories:
            source.register(factory, **kwargs)
        resources["chat_model"] = chat_model
    try:
        serve_mcp(
            source,
            transport=args.transport,
            host=args.host,
            port=args.port,
            name=args.name,
            store=store,
            store_resources=resources,
            stream_session=session,
            resources=None if args.no_resources else (workspace or Path.cwd()).resolve(),
            **memory,
            on_ready=functools.partial(_serving, resume_collector=collector_paused),
            handshake=handshake,
        )
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (OSError, ImportError) as exc:  # the port is taken, or HTTP without the SDK
        print(f"lionfactory: cannot serve: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _serving(url: str, *, resume_collector: bool = False) -> None:
    """Say where the server is, once it is ready to take requests.

    Everything made until now (the modules, the tools' classes and models,
    the served tools' listing) lives as long as the process: it moves to the
    collector's permanent generation (`gc.freeze`), so the collections a
    long session's calls set off no longer walk those ~50,000 objects each
    time (a full one took 30-45 ms). Only this command does it: the process
    is its own, where a program calling `serve_mcp` may want otherwise.
    With `resume_collector` the collector, paused while the server loaded,
    runs again from now on.
    """
    gc.freeze()
    if resume_collector:
        gc.enable()
    print(f"lionfactory: serving MCP at {url}", file=sys.stderr, flush=True)
