"""simple_commands: every simple command of a script, with quoting undone."""

from __future__ import annotations

import pytest

from lionfactory.coding import ShellSyntaxError, SimpleCommand, simple_commands


def words(script: str) -> list[tuple[str, ...]]:
    return [command.words for command in simple_commands(script)]


def test_lists_and_pipelines_yield_each_command_in_order() -> None:
    assert words("a 1 && b 2 || c; d | e") == [("a", "1"), ("b", "2"), ("c",), ("d",), ("e",)]


def test_quotes_and_escapes_are_removed() -> None:
    assert words("""echo 'a b' "c d" e\\ f $'g\\th'""") == [("echo", "a b", "c d", "e f", "g\th")]


def test_substitutions_are_commands_of_their_own() -> None:
    commands = simple_commands('echo "x $(date -u)" `id`')
    assert [c.words for c in commands] == [
        ("echo", "x $(date -u)", "`id`"),
        ("date", "-u"),
        ("id",),
    ]
    assert commands[0].dynamic and not commands[0].substitution
    assert commands[1].substitution and commands[2].substitution


def test_assignments_and_redirects_are_kept_apart_from_the_words() -> None:
    (command,) = simple_commands("A=1 B='two' make -j2 > log.txt 2>&1")
    assert command == SimpleCommand(
        words=("make", "-j2"),
        assignments=("A=1", "B='two'"),
        redirects=("log.txt", "1"),
        text="A=1 B='two' make -j2",
    )


def test_a_redirect_around_a_group_applies_to_its_commands() -> None:
    commands = simple_commands("{ a; b; } > out")
    assert [c.redirects for c in commands] == [("out",), ("out",)]


@pytest.mark.parametrize(
    "script",
    [
        "if a; then b; fi",
        "while a; do b; done",
        "f() { a; b; }",
        "(a; b)",
        "case x in y) a;; *) b;; esac",
    ],
)
def test_compound_commands_are_looked_into(script: str) -> None:
    assert words(script) == [("a",), ("b",)]


def test_deep_nesting_does_not_recurse() -> None:
    script = "( " * 3000 + "a" + " )" * 3000  # "((" would open arithmetic
    assert words(script) == [("a",)]


@pytest.mark.parametrize("script", ["echo 'x", "echo $(", "| a", "a &&"])
def test_invalid_syntax_raises_with_the_position(script: str) -> None:
    with pytest.raises(ShellSyntaxError) as caught:
        simple_commands(script)
    assert "not valid shell syntax near character" in caught.value.message
    assert 0 <= caught.value.offset <= len(script)


def test_backticks_in_an_expanded_here_document_are_commands() -> None:
    # The grammar leaves them as text, but a shell runs them.
    commands = simple_commands("cat <<EOF > out\nx `rm -rf d` $(id) `echo \\`date\\``\nEOF")
    words = {c.words for c in commands}
    assert ("rm", "-rf", "d") in words
    assert ("date",) in words
    assert all(c.substitution for c in commands if c.words != ("cat",))


def test_a_quoted_here_document_runs_nothing() -> None:
    assert [c.words for c in simple_commands("cat <<'EOF'\n`rm -rf d`\nEOF")] == [("cat",)]


def test_an_unclosed_backtick_in_a_here_document_is_a_syntax_error() -> None:
    with pytest.raises(ShellSyntaxError, match="never closed"):
        simple_commands("cat <<EOF\n`rm -rf d\nEOF")


def test_here_documents_and_here_strings_are_the_commands_stdin() -> None:
    (doc,) = simple_commands("bash <<EOF > out\nrm -rf d\nEOF")
    (string,) = simple_commands("sh <<< 'rm -rf d'")
    assert doc.stdin == ("rm -rf d\n",)
    assert string.stdin == ("rm -rf d",)
