"""The README says what is true: its first screen does what it shows (the Python example and
the CLI line, run as written against a temporary store with the real model), every path and
link it names exists, every ``make`` target and ``engrain`` command it names is real, and
every public method, command, setting, environment variable and doc page is in it."""

from __future__ import annotations

import inspect
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import engrain
from engrain import Engine, Settings
from engrain.cli.app import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
#: Names in backticks that are not files of this repository (an MCP client's own config files).
NOT_OURS = {"claude_desktop_config.json", "mcp.json"}
#: What a repository path starts with.
TOP = r"(?:src|docs|bench|tests|examples|scripts|\.ci)/"


def first_block(language: str, containing: str = "") -> str:
    """The first fenced block in ``language`` (holding ``containing``) of the README."""
    for found in re.finditer(rf"```{language}\n(.*?)```", TEXT, re.S):
        if containing in found.group(1):
            return found.group(1)
    raise AssertionError(f"the README shows no {language} block with {containing!r}")


def code_spans() -> list[str]:
    """Every inline code span and every line of a fenced block."""
    fenced = re.findall(r"```\w*\n(.*?)```", TEXT, re.S)
    bare = re.sub(r"```\w*\n.*?```", "", TEXT, flags=re.S)
    return [*re.findall(r"`([^`\n]+)`", bare), *"\n".join(fenced).splitlines()]


def expand_braces(path: str) -> list[str]:
    """``a-{b,c}.json`` → ``a-b.json``, ``a-c.json``."""
    found = re.search(r"\{([^}]*)\}", path)
    if not found:
        return [path]
    return [
        p
        for choice in found.group(1).split(",")
        for p in expand_braces(path[: found.start()] + choice + path[found.end() :])
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.model
def test_the_first_python_example_prints_the_remembered_preference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = first_block("python")
    assert "Engine()" in code  # the embedded default, as a new user runs it
    monkeypatch.setenv("ENGRAIN_DATA_DIR", str(tmp_path))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own code
    printed = capsys.readouterr().out
    assert "<memory>" in printed and "I prefer tabs over spaces" in printed
    engine = namespace["engine"]
    engine.close()  # type: ignore[attr-defined]


@pytest.mark.model
def test_the_first_cli_line_answers_with_what_it_remembered(tmp_path: Path) -> None:
    line = next(
        line for line in first_block("bash", "engrain -u").splitlines() if "engrain -u" in line
    )
    env = {"ENGRAIN_DATA_DIR": str(tmp_path), "ENGRAIN_URL": None, "ENGRAIN_CONFIG": None}
    outputs = []
    for command in line.split("&&"):
        words = shlex.split(command)
        assert words[0] == "engrain"
        result = CliRunner().invoke(cli, words[1:], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert "8080" in outputs[-1]  # the context block holds the remembered port


def test_every_link_and_repository_path_exists() -> None:
    anchors = {slug(h) for h in re.findall(r"^#+ (.*)$", TEXT, re.M)}
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", TEXT):
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            if target[1:] not in anchors:
                missing.append(target)
        elif not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    for path in re.findall(rf"(?<![\w/.]){TOP}[\w./{{}},-]*[\w/}}]", TEXT):
        missing += [p for p in expand_braces(path) if not (ROOT / p).exists()]
    results = ROOT / "bench" / "results"
    for span in code_spans():
        for name in re.findall(r"(?<![\w/.{},-])([\w.{},-]+\.json)\b", span):
            if name not in NOT_OURS and "/" not in name:
                missing += [n for n in expand_braces(name) if not (results / n).exists()]
    assert not missing, f"the README names what does not exist: {missing}"


def test_every_make_target_named_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", TEXT))
    named |= set(re.findall(r"`((?:bench|test)-[\w-]+)`", TEXT))
    assert named, "the README names no make target"
    assert named <= targets, f"not in the Makefile: {sorted(named - targets)}"


def test_every_engrain_command_named_exists_with_its_options() -> None:
    named = []
    for span in code_spans():
        for found in re.finditer(
            r"(?<![\w.])engrain((?: -u \w+| --[\w-]+(?: \S+)?)*) ([a-z][\w-]*)( [a-z]+)?", span
        ):
            if re.search(r"\b(from|import) engrain", span[: found.end()]):
                continue
            named.append((found.group(2), (found.group(3) or "").strip(), span[found.end() :]))
    assert len(named) > 10, "the README names few engrain commands"
    unknown = []
    for name, sub, rest in named:
        command = cli.commands.get(name)
        if command is None:
            unknown.append(name)
            continue
        group = getattr(command, "commands", None)
        if group is not None and sub:  # `engrain keys` alone names the group
            if sub not in group:
                unknown.append(f"{name} {sub}")
                continue
            command = group[sub]
        flags = {opt for p in [*command.params, *cli.params] for opt in getattr(p, "opts", [])}
        flags |= {
            opt for p in [*command.params, *cli.params] for opt in getattr(p, "secondary_opts", [])
        }
        options = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest.split("#")[0])
        unknown += [f"{name} {option}" for option in options if option not in flags]
    assert not unknown, f"the README names what the CLI does not have: {unknown}"


def test_every_public_name_command_setting_and_variable_is_documented() -> None:
    methods = [
        n for n, f in vars(Engine).items() if not n.startswith("_") and inspect.isfunction(f)
    ]
    missing = [f"Engine.{n}" for n in methods if f"`{n}(" not in TEXT]
    missing += [n for n in engrain.__all__ if f"`{n}" not in TEXT]
    missing += [f"engrain {c}" for c in cli.commands if f"`engrain {c}" not in TEXT]
    missing += [f for f in Settings.model_fields if f"`{f}`" not in TEXT]
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "engrain").rglob("*.py"))
    variables = set(re.findall(r"[\"'`](ENGRAIN_[A-Z0-9_]*[A-Z0-9])[\"'`]", source))
    missing += [v for v in sorted(variables) if f"`{v}" not in TEXT]
    assert not missing, f"not in the README: {missing}"


def test_every_doc_page_is_in_the_readme_index() -> None:
    index = TEXT.split("## Documentation", 1)[1]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert pages, "no docs found"
    missing = [p for p in pages if f"]({p})" not in index]
    assert not missing, f"docs missing from the README's index: {missing}"


def test_the_readme_tells_no_session_story() -> None:
    """Session narrative lives in docs/history.md; the README keeps current numbers."""
    assert not re.findall(r"\b[Ss]ession \d+", TEXT)
