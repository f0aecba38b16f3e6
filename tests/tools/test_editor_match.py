"""editor matching: exact without splitting CRLF, tolerant rules with proof, refusals, snippet."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory.tools._editor_match import Applied, Refused, replace
from lionfactory.tools._editor_text import snippet


def apply(text: str | bytes, old: str, new: str, name: str = "f.txt", **kw) -> Applied | Refused:
    data = text.encode() if isinstance(text, str) else text
    return replace(data, old, new, replace_all=kw.get("replace_all", False), shown=name)


# --- CRLF -------------------------------------------------------------------------


def test_an_old_string_starting_with_a_blank_line_never_splits_a_crlf():
    result = apply(b"a\r\n\r\nb\r\n", "\nb", "\nc")
    assert isinstance(result, Applied)
    assert result.data == b"a\r\n\r\nc\r\n"


def test_an_old_string_ending_with_cr_never_splits_a_crlf():
    # "a\r" would match only the first half of the line ending: no such match.
    result = apply(b"a\r\nb\r\n", "a\r", "x\r\r")
    assert isinstance(result, Refused)


def test_the_one_valid_site_is_the_one_replaced_when_a_raw_match_splits_a_crlf():
    # "\nX\n" occurs twice as bytes: at 2 its newline is a CRLF's second half
    # (no site), at 4 it is a line ending of its own (the only site). The
    # replacement lands on the site, not on the first raw occurrence.
    result = apply(b"a\r\nX\nX\n", "\nX\n", "\nY\n")
    assert isinstance(result, Applied)
    assert (result.site, result.count) == (4, 1)
    assert result.data == b"a\r\nX\nY\n"


def test_replace_all_skips_the_raw_matches_that_split_a_crlf():
    result = apply(b"a\r\nX\nX\nX\n", "\nX", "\nY", replace_all=True)
    assert isinstance(result, Applied)
    assert result.data == b"a\r\nX\nY\nY\n"


_line = st.text(alphabet="ab \t", max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line, min_size=1, max_size=8),
    crlf=st.booleans(),
    start=st.integers(0, 7),
    length=st.integers(1, 3),
    lead=st.booleans(),
    replacement=st.lists(st.text(alphabet="xy", max_size=3), min_size=1, max_size=3),
)
def test_edits_keep_every_line_ending_whole(lines, crlf, start, length, lead, replacement):
    ending = "\r\n" if crlf else "\n"
    text = ending.join(lines) + ending
    start = min(start, len(lines) - 1)
    window = lines[start : start + length]
    old = "\n".join(window)
    new = "\n".join(replacement)
    if lead and start > 0:
        old, new = "\n" + old, "\n" + new
    result = apply(text, old, new)
    if isinstance(result, Refused):
        return
    out = result.data.decode()
    # No lone CR or LF appears in a CRLF file, and no CR at all in an LF file.
    if crlf:
        assert out.replace("\r\n", "").count("\n") == 0 and "\r\r" not in out
        assert out.count("\r") == out.count("\n")
    else:
        assert "\r" not in out


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(
        st.sampled_from(["x = 1", "if x:", "y()", "return y", "z"]),
        min_size=2,
        max_size=6,
        unique=True,
    ),
    levels=st.lists(st.integers(0, 3), min_size=6, max_size=6),
    shift=st.sampled_from([-8, -4, 4, 8]),
    tabs=st.booleans(),
)
def test_a_uniformly_shifted_edit_lands_re_indented_in_the_file_style(bodies, levels, shift, tabs):
    unit = "\t" if tabs else "    "
    file_lines = [unit * (levels[i] + 2) + b for i, b in enumerate(bodies)]
    text = "def f():\n" + "\n".join(file_lines) + "\nend\n"
    # The model writes spaces, shifted uniformly.
    model = [" " * (4 * (levels[i] + 2) + shift) + b for i, b in enumerate(bodies)]
    new_model = list(model)
    new_model[0] = model[0] + "  # changed"
    result = apply(text, "\n".join(model), "\n".join(new_model))
    assert isinstance(result, Applied), result
    expected = list(file_lines)
    expected[0] = file_lines[0] + "  # changed"
    assert result.data.decode() == "def f():\n" + "\n".join(expected) + "\nend\n"
    assert result.matched == ("tabs" if tabs else "indent")


# --- tolerant rules ---------------------------------------------------------------


def test_trailing_whitespace_in_the_file_is_tolerated_and_kept_on_context_lines():
    result = apply("a = 1  \nb = 2\n", "a = 1\nb = 2", "a = 1\nb = 3")
    assert isinstance(result, Applied)
    assert result.matched == "trailing_whitespace"
    assert result.data == b"a = 1  \nb = 3\n"


def test_crlf_old_string_in_an_lf_file_is_a_line_endings_match():
    result = apply("a\nb\nc\n", "a\r\nb", "a\r\nB")
    assert isinstance(result, Applied)
    assert result.matched == "line_endings"
    assert result.data == b"a\nB\nc\n"


def test_curly_quotes_and_dashes_map_back_to_the_file_characters():
    result = apply('s = "a-b"\n', "s = \u201ca\u2013b\u201d", "s = \u201ca\u2013c\u201d")
    assert isinstance(result, Applied)
    assert result.matched == "unicode"
    assert result.data == b's = "a-c"\n'


def test_a_no_break_space_in_old_string_matches_a_space():
    result = apply("x = 1\ny = 2\n", "x\u00a0= 1\ny = 2", "x\u00a0= 5\ny = 2")
    assert isinstance(result, Applied)
    assert result.data == b"x = 5\ny = 2\n"


def test_a_tolerant_match_that_is_not_unique_is_refused_with_every_line():
    text = "def f():\n    return 1\n\ndef g():\n    return 1\n"
    result = apply(text, "  return 1  ", "  return 2")
    assert isinstance(result, Refused)
    assert "2 times" in result.message and "lines 2, 5" in result.message


def test_an_uneven_indentation_difference_is_not_a_shift():
    text = "def f():\n    x = 1\n    return x\n"
    result = apply(text, "def f():\n        x = 1", "def f():\n        x = 2")
    assert isinstance(result, Refused)
    assert text == "def f():\n    x = 1\n    return x\n"


def test_a_tolerant_match_that_would_break_python_is_refused():
    text = "def f():\n    if x:\n        pass\n    return 1\n"
    # Shifted by -4: re-indenting "pass" by +4 is fine, but the new line at
    # column 0 cannot move below zero... use one that un-parses instead.
    result = apply(text, "if x:\n    pass", "if x:\npass", name="m.py")
    assert isinstance(result, Refused)
    assert "unparsable" in result.message or "indented less" in result.message


def test_replace_all_with_a_tolerant_match_applies_every_unambiguous_place():
    text = "a = 1  \nb\na = 1  \n"
    result = apply(text, "a = 1", "a = 2", replace_all=True)
    # Exact "a = 1" occurs twice as a substring: exact replace_all wins.
    assert isinstance(result, Applied) and result.count == 2
    text = "if x:\n\tf()\nif y:\n\tf()\n"
    result = apply(text, "if x:\n    f()", "if x:\n    g()", replace_all=True)
    assert isinstance(result, Applied) and result.data == b"if x:\n\tg()\nif y:\n\tf()\n"


# --- refusals ---------------------------------------------------------------------


def test_a_refusal_shows_the_nearest_lines_and_names_the_invisible_difference():
    text = "class A:\n\tdef f(self):\n\t\treturn 1\n\tdef g(self):\n\t\treturn 2\n"
    result = apply(text, "\tdef f(self):\n\t\treturn 9", "x")
    assert isinstance(result, Refused)
    message = result.message
    assert ">3\t\t\treturn 1" in message
    assert " 2\t\tdef f(self):" in message
    assert "old_string line 2" in message
    assert "the text differs" in message


def test_a_refusal_explains_tabs_against_spaces():
    text = "class A:\n\tdef f(self):\n\t\treturn 1\n\tx = 2\n"
    result = apply(text, "    def f(self):\n        return 1\n  x = 2", "y")
    assert isinstance(result, Refused)
    assert "indents it with 1 tab, old_string with 4 spaces" in result.message


def test_a_refusal_names_a_lookalike_character_it_could_not_prove():
    text = "a = 'x'\nb = 'x'\n"
    result = apply(text, "q = \u2018x\u2019", "r")
    assert isinstance(result, Refused)
    assert "was not found" in result.message


def test_many_matches_list_every_line():
    text = "x\n" * 30
    result = apply(text, "x", "y")
    assert isinstance(result, Refused)
    assert ", ".join(str(n) for n in range(1, 31)) in result.message


# --- snippet at the end of a file (26.10) ------------------------------------------


def test_the_snippet_numbers_no_line_after_the_last_one_with_a_final_newline():
    data = b"a\nb\nc\n"
    shown = snippet(data, data.index(b"c"), 2)
    assert shown.split("\n")[-1] == "3\tc"


def test_the_snippet_at_the_last_line_without_a_final_newline():
    data = b"a\nb\nc"
    shown = snippet(data, data.index(b"c"), 1)
    assert shown.split("\n")[-1] == "3\tc"


def test_the_snippet_of_an_emptied_file_says_so():
    assert snippet(b"", 0, 0) == "(the file is now empty)"
