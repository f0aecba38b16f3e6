"""Workspace: path containment, symlinks, protected names."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionfactory._os import beneath as _beneath
from lionfactory._os.workspace import (
    BACKUP_SUFFIXES,
    DEFAULT_PROTECTED_NAMES,
    PathRefused,
    Workspace,
    protected_matcher,
)


@pytest.fixture
def ws(workspace: Path) -> Workspace:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("print(1)\n")
    return Workspace.at(workspace)


def refusal(ws: Workspace, path: object) -> str:
    with pytest.raises(PathRefused) as info:
        ws.resolve(path)
    return info.value.message


def test_relative_path_resolves_inside_the_root(ws: Workspace):
    assert ws.resolve("src/a.py") == ws.root / "src" / "a.py"


def test_absolute_path_inside_the_root_is_accepted(ws: Workspace):
    assert ws.resolve(str(ws.root / "src" / "a.py")) == ws.root / "src" / "a.py"


def test_dot_is_the_root(ws: Workspace):
    assert ws.resolve(".") == ws.root


def test_dotdot_escape_is_refused_with_advice(ws: Workspace):
    message = refusal(ws, "../outside.txt")
    assert "outside the workspace" in message
    assert "give a path inside it" in message


def test_dotdot_that_stays_inside_is_accepted(ws: Workspace):
    assert ws.resolve("src/../src/a.py") == ws.root / "src" / "a.py"


def test_absolute_path_elsewhere_is_refused(ws: Workspace):
    assert "outside the workspace" in refusal(ws, "/etc/passwd")


def test_home_relative_path_is_refused(ws: Workspace):
    message = refusal(ws, "~/.bashrc")
    assert "relative to the workspace root" in message


def test_nul_byte_is_refused(ws: Workspace):
    assert "NUL" in refusal(ws, "src/a.py\x00.txt")


def test_empty_path_is_refused_with_a_hint(ws: Workspace):
    assert "use '.'" in refusal(ws, "  ")


def test_non_string_path_is_refused(ws: Workspace):
    assert "must be a string" in refusal(ws, 42)


def test_symlink_as_final_component_is_refused(ws: Workspace):
    (ws.root / "link.py").symlink_to(ws.root / "src" / "a.py")
    message = refusal(ws, "link.py")
    assert "symbolic link" in message
    assert "Use the path of the file it points to" in message


def test_intermediate_symlink_inside_the_root_is_followed(ws: Workspace):
    (ws.root / "alias").symlink_to(ws.root / "src")
    assert ws.resolve("alias/a.py") == ws.root / "src" / "a.py"


def test_intermediate_symlink_leading_outside_is_refused(ws: Workspace, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (ws.root / "escape").symlink_to(outside)
    assert "outside the workspace" in refusal(ws, "escape/secret.txt")


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "config/.env.production",
        ".ENV",
        "deploy/.env/values.txt",
        ".netrc",
        ".pgpass",
        "site/.htpasswd",
        "keys/id_rsa",
        "id_dsa",
        "id_ecdsa",
        "ID_ED25519",
    ],
)
def test_protected_names_are_refused_in_any_component(ws: Workspace, path: str):
    message = refusal(ws, path)
    assert "protected" in message
    assert "may hold secrets" in message


def test_protected_name_behind_an_intermediate_symlink_is_refused(ws: Workspace):
    (ws.root / "conf").mkdir()
    (ws.root / "conf" / "x").write_text("")
    (ws.root / ".env").mkdir()
    (ws.root / "innocent").symlink_to(ws.root / ".env")
    assert "protected" in refusal(ws, "innocent/x")


def test_id_rsa_pub_is_not_protected(ws: Workspace):
    assert ws.resolve("keys/id_rsa.pub") == ws.root / "keys" / "id_rsa.pub"


def test_protected_names_are_a_factory_option(workspace: Path):
    ws = Workspace.at(workspace, protected=["*.key"])
    assert ws.resolve(".env") == workspace / ".env"
    assert "protected" in refusal(ws, "certs/server.KEY")


def test_a_protected_pattern_with_a_slash_is_rejected(workspace: Path):
    with pytest.raises(ValueError, match="single path component, got 'a/b'"):
        Workspace.at(workspace, protected=["a/b"])


def test_root_is_resolved_once(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(workspace)
    ws = Workspace.at()
    monkeypatch.chdir(tmp_path)
    assert ws.root == workspace.resolve()


def test_missing_root_is_rejected_at_once(tmp_path: Path):
    with pytest.raises(ValueError, match="must be an existing directory, got"):
        Workspace.at(tmp_path / "nope")


def test_root_of_the_wrong_type_is_rejected(tmp_path: Path):
    with pytest.raises(TypeError, match="got 3"):
        Workspace.at(3)  # type: ignore[arg-type]


def test_entries_hide_git_protected_names_and_symlinks(ws: Workspace):
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "HEAD").write_text("ref")
    (ws.root / ".env").write_text("SECRET=1")
    (ws.root / "src" / "id_ed25519").write_text("key")
    (ws.root / "src" / "link.py").symlink_to(ws.root / "src" / "a.py")
    (ws.root / "src" / "dirlink").symlink_to(ws.root / "src")
    found = list(ws.entries(ws.locate("."), recursive=True))
    assert found == [("src", True), ("src/a.py", False)]


def test_is_hidden_marks_git_and_protected_paths(ws: Workspace):
    assert ws.is_hidden(".git/config")
    assert ws.is_hidden("app/.env.local")
    assert not ws.is_hidden("src/a.py")


def test_is_hidden_answers_for_a_path_deeper_than_python_recursion(ws: Workspace) -> None:
    deep = "d/" * 3000
    assert not ws.is_hidden(deep + "a.py")
    assert ws.is_hidden(deep + ".env/" + deep + "a.py")
    assert ws.is_hidden(deep + ".git/" + deep + "a.py")
    assert not ws.is_hidden(deep + "a.py")  # the same answers again, remembered


_COMPONENTS = st.sampled_from(
    ["src", "a.py", ".git", ".env", ".ENV.", "id_rsa", "id_rsa.pub", "notes", ".", "", "pkg"]
)


@given(paths=st.lists(st.lists(_COMPONENTS, min_size=1, max_size=4).map("/".join), max_size=30))
def test_is_hidden_answers_as_its_components_do_in_any_order(paths: list[str]) -> None:
    # The rule remembers directories and names; whatever order paths come
    # in (a directory before or after the files under it, the same path
    # twice), each answer is what its components say.
    ws = Workspace.at(Path("/"))
    for path in paths + paths:
        parts = [part for part in path.split("/") if part not in ("", ".")]
        expected = any(part == ".git" or ws.is_protected(part) for part in parts)
        assert ws.is_hidden(path) is expected, path


@pytest.fixture(params=["openat2", "walk"])
def strategy(request: pytest.FixtureRequest):
    """Each opening test runs with the kernel's openat2 and with the component walk."""
    with _beneath.forced_strategy(request.param):
        yield request.param


def test_locate_opens_a_file_below_the_root(ws: Workspace, strategy: str):
    fd = ws.locate("src/a.py").open_read()
    try:
        assert os.read(fd, 100) == b"print(1)\n"
    finally:
        os.close(fd)


@pytest.mark.parametrize("link", ["link.py", "inner/a.py"])
def test_opening_refuses_a_symlink_in_any_component(ws: Workspace, strategy: str, link: str):
    (ws.root / "link.py").symlink_to(ws.root / "src" / "a.py")
    (ws.root / "inner").symlink_to(ws.root / "src")  # stays inside, still refused
    with pytest.raises(PathRefused, match="symbolic link"):
        ws.locate(link).open(os.O_WRONLY)
    assert (ws.root / "src" / "a.py").read_text() == "print(1)\n"


def test_a_missing_file_is_an_os_error(ws: Workspace, strategy: str):
    with pytest.raises(FileNotFoundError):
        ws.locate("src/missing.py").open_read()
    with pytest.raises(NotADirectoryError):
        ws.locate("src/a.py/x").open_read()


def test_make_parent_creates_directories_and_reports_them(ws: Workspace, strategy: str):
    fd, created = ws.locate("n1/n2/file.txt").make_parent()
    os.close(fd)
    assert [name for _, name in created] == ["n1", "n2"]
    _beneath.release_created(created, remove=True)
    assert not (ws.root / "n1").exists()


def test_make_parent_refuses_a_link_on_the_way(ws: Workspace, strategy: str, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.root / "out").symlink_to(outside)
    with pytest.raises(PathRefused, match="symbolic link"):
        ws.locate("out/new/file.txt").make_parent()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    "header",
    [
        b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n",
        b"-----BEGIN RSA PRIVATE KEY-----\n",
        b"\xef\xbb\xbf\n  -----BEGIN ENCRYPTED PRIVATE KEY-----\n",
        b"-----BEGIN PRIVATE KEY-----\n",
        b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n",
        b"PuTTY-User-Key-File-3: ssh-ed25519\n",
    ],
)
def test_a_private_key_is_refused_whatever_its_name(ws: Workspace, header: bytes):
    (ws.root / "notes.txt").write_bytes(header + b"AAAA\n")
    with pytest.raises(PathRefused, match="private key"):
        ws.locate("notes.txt").open_read()


def test_a_public_key_or_certificate_is_not_a_private_key(ws: Workspace):
    (ws.root / "cert.txt").write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n")
    (ws.root / "pub.txt").write_bytes(b"ssh-ed25519 AAAAC3Nza user@host\n")
    for name in ("cert.txt", "pub.txt"):
        os.close(ws.locate(name).open_read())


SECRET_NAMES = [
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "id_xmss",
    "identity",
    "deploy_key",
    "server.key",
    "private.pem",
    "cert.p12",
    "cert.pfx",
    "release.jks",
    "release.keystore",
    "AuthKey_ABC.p8",
    "putty.ppk",
    ".env",
    ".env.local",
    "prod.env",
    ".envrc",
    ".netrc",
    "_netrc",
    ".pgpass",
    "pgpass.conf",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".yarnrc.yml",
    ".vault-token",
    "credentials.json",
    "client_secret_123.apps.googleusercontent.com.json",
    "application_default_credentials.json",
    "credentials.db",
    "access_tokens.db",
    "accessTokens.json",
    "msal_token_cache.json",
    "service_principal_entries.json",
    ".aws",
    ".azure",
    ".ssh",
    ".gnupg",
    ".kube",
    "kubeconfig",
]


def _spelled(name: str, case: str, windows: str) -> str:
    cased = {"lower": name, "upper": name.upper(), "title": name.title()}[case]
    return cased + windows


@given(
    name=st.sampled_from(SECRET_NAMES),
    suffix=st.sampled_from(("", *BACKUP_SUFFIXES)),
    case=st.sampled_from(["lower", "upper", "title"]),
    windows=st.sampled_from(["", ".", " ", "..", "::$DATA", ":secret"]),
)
def test_secret_names_are_refused_in_every_spelling(
    name: str, suffix: str, case: str, windows: str
) -> None:
    """Any case, any backup suffix, and the spellings Windows opens as the same file."""
    ws = Workspace.at(Path(__file__).parent)
    path = "sub/" + _spelled(name + suffix, case, windows)
    with pytest.raises(PathRefused, match="protected"):
        ws.locate(path)


@given(
    family=st.sampled_from(["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]),
    tail=st.text(st.characters(blacklist_characters="/\x00", codec="utf-8"), max_size=8),
)
def test_a_private_key_family_is_refused_with_any_suffix_but_pub(family: str, tail: str) -> None:
    ws = Workspace.at(Path(__file__).parent)
    name = family + tail
    if tail.casefold() == ".pub":
        ws.locate(name)
    else:
        with pytest.raises(PathRefused, match="protected"):
            ws.locate(name)


@pytest.mark.parametrize(
    "name",
    [
        "id_rsa.pub",
        "identity.py",
        "deploy_keys.md",
        "keys.py",
        "environment.ts",
        "README.md",
        "credentials.py",
        "pem.py",
        "key_test.go",
        "env",
        "envrc.md",
    ],
)
def test_ordinary_names_are_not_protected(name: str) -> None:
    ws = Workspace.at(Path(__file__).parent)
    assert ws.locate(name).parts == (name,)


def test_entries_skip_prunes_whole_subtrees(ws: Workspace):
    (ws.root / "build" / "deep").mkdir(parents=True)
    (ws.root / "build" / "deep" / "out.py").write_text("")
    (ws.root / "src" / "b.py").write_text("")
    seen: list[str] = []

    def skip(relative: str, is_dir: bool) -> bool:
        seen.append(relative)
        return relative == "build" or relative.endswith("b.py")

    found = list(ws.entries(ws.locate("."), recursive=True, skip=skip))
    assert found == [("src", True), ("src/a.py", False)]
    assert "build/deep" not in seen


# -- the compiled protected-name rule -------------------------------------------------

_NAME_PARTS = st.sampled_from(
    [
        *SECRET_NAMES,
        "id_rsa",
        "id_ed25519",
        "id_rsa.pub",
        ".pub",
        "readme",
        "x",
        "",
        ".env",
        "env",
        "key",
        ".",
        "-sk",
        "client_secret",
        "credentials",
        ".json",
    ]
)
_NAME_TAILS = st.sampled_from(["", *BACKUP_SUFFIXES, ".txt", ".py", "~~", ".bak.old", ".pub", "."])


@given(
    head=_NAME_PARTS,
    middle=st.text(st.characters(blacklist_characters="/\x00"), max_size=4),
    tail=_NAME_TAILS,
)
def test_the_compact_protected_rule_agrees_with_every_pattern(
    head: str, middle: str, tail: str
) -> None:
    """The factored, compiled rule and the long list of fnmatch patterns match the same names."""
    name = (head + middle + tail).casefold()
    long_list = any(fnmatch.fnmatchcase(name, p.casefold()) for p in DEFAULT_PROTECTED_NAMES)
    assert bool(protected_matcher(Workspace.at(Path(__file__).parent).protected).match(name)) == (
        long_list
    )


def test_the_protected_rule_is_compiled_once_per_set(tmp_path: Path) -> None:
    first, second = Workspace.at(tmp_path), Workspace.at(tmp_path / "..")
    assert first._protected_rule is second._protected_rule
    custom = Workspace.at(tmp_path, protected=["*.secret"])
    assert custom._protected_rule is not first._protected_rule
    assert custom.is_protected("a.SECRET") and not custom.is_protected(".env")


def test_a_custom_set_with_backup_spellings_keeps_its_meaning(tmp_path: Path) -> None:
    """A set that holds a base and all its backup spellings factors without change."""
    names = ["db.conf", *(f"db.conf{suffix}" for suffix in BACKUP_SUFFIXES), "*.x[!y]"]
    ws = Workspace.at(tmp_path, protected=names)
    assert ws.is_protected("DB.conf.bak") and ws.is_protected("db.conf")
    assert not ws.is_protected("db.conf.bak.old") and not ws.is_protected("db.conf.txt")
    assert ws.is_protected("a.xz") and not ws.is_protected("a.xy")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_a_file_is_read_through_a_directory_link_inside(ws: Workspace, strategy: str):
    (ws.root / "docs").symlink_to("src")
    assert _read(ws.locate("docs/a.py").open_read()) == b"print(1)\n"


def test_a_link_to_a_file_inside_is_read(ws: Workspace, strategy: str):
    (ws.root / "src" / "alias.py").symlink_to("a.py")
    (ws.root / "up.py").symlink_to("src/../src/a.py")
    assert _read(ws.locate("src/alias.py").open_read()) == b"print(1)\n"
    assert _read(ws.locate("up.py").open_read()) == b"print(1)\n"


def test_a_directory_link_inside_is_listed(ws: Workspace, strategy: str):
    (ws.root / "docs").symlink_to("src")
    names = [path for path, _ in ws.entries(ws.locate("docs"), recursive=False)]
    assert "docs/a.py" in names


@pytest.mark.parametrize("target", ["../outside/secret.txt", "ABSOLUTE"])
def test_a_link_leaving_the_root_is_refused(
    ws: Workspace, strategy: str, tmp_path: Path, target: str
):
    outside = ws.root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE")
    spelled = str(outside / "secret.txt") if target == "ABSOLUTE" else target
    (ws.root / "leak.txt").symlink_to(spelled)
    with pytest.raises(PathRefused, match="outside the workspace"):
        ws.locate("leak.txt").open_read()


@pytest.mark.parametrize(("name", "target"), [("notes", ".env"), ("x", ".git/config")])
def test_a_link_to_a_protected_name_or_git_is_refused(
    ws: Workspace, strategy: str, name: str, target: str
):
    (ws.root / ".env").write_text("SECRET=1\n")
    (ws.root / ".git").mkdir(exist_ok=True)
    (ws.root / ".git" / "config").write_text("[core]\n")
    (ws.root / name).symlink_to(target)
    with pytest.raises(PathRefused, match=r"protected|\.git"):
        ws.locate(name).open_read()


def test_a_link_to_a_directory_does_not_expose_its_protected_names(ws: Workspace, strategy: str):
    (ws.root / "app").mkdir()
    (ws.root / "app" / ".env").write_text("SECRET=1\n")
    (ws.root / "cfg").symlink_to("app")
    with pytest.raises(PathRefused, match="protected"):
        ws.locate("cfg/.env").open_read()
    (ws.root / "envlink").symlink_to("app/.env")
    (ws.root / "indirect").symlink_to("envlink")
    with pytest.raises(PathRefused, match="protected"):
        ws.locate("indirect").open_read()


def test_a_link_loop_is_refused(ws: Workspace, strategy: str):
    (ws.root / "a").symlink_to("b")
    (ws.root / "b").symlink_to("a")
    with pytest.raises(PathRefused, match="loop"):
        ws.locate("a").open_read()
    with pytest.raises(PathRefused, match="loop"):
        ws.locate("a/x.txt").open_read()


def test_writing_through_a_link_is_still_refused(ws: Workspace, strategy: str):
    (ws.root / "docs").symlink_to("src")
    with pytest.raises(PathRefused, match="symbolic link"):
        ws.locate("docs/new.txt").make_parent()
    with pytest.raises(PathRefused, match="symbolic link"):
        ws.locate("docs/a.py").open(os.O_WRONLY)


def test_dotdot_in_a_link_is_relative_to_the_links_directory(ws: Workspace, strategy: str):
    (ws.root / "sub").mkdir()
    (ws.root / "sub" / "up.py").symlink_to("../src/a.py")
    (ws.root / "sub" / "far").symlink_to("../../" + ws.root.name + "/src")
    assert _read(ws.locate("sub/up.py").open_read()) == b"print(1)\n"
    # Out of the root and back in is still out: the kernel refuses the step above the root.
    with pytest.raises(PathRefused, match="outside the workspace"):
        ws.locate("sub/far/a.py").open_read()


def test_open_following_reports_the_resolved_components(ws: Workspace, strategy: str):
    (ws.root / "docs").symlink_to("src")
    root_fd = ws.open_root()
    try:
        fd, real = _beneath.open_following(root_fd, ("docs", "a.py"), os.O_RDONLY)
    finally:
        os.close(root_fd)
    os.close(fd)
    assert real == ("src", "a.py")


def test_a_workspace_with_the_asked_protected_names_is_taken_as_it_is(tmp_path: Path) -> None:
    built = Workspace.at(tmp_path)
    assert Workspace.at(built) is built
    assert Workspace.at(built, protected=sorted(built.protected)) is built
    other = Workspace.at(built, protected=["*.secret"])
    assert other is not built and other.root == built.root
    assert other.is_protected("a.secret") and not other.is_protected(".env")
