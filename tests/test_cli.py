"""The ``engrain`` command line, end to end through click's runner over a SQLite file with the
deterministic hash embedder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from engrain.cli import INSTALL_HINT, memories
from engrain.cli.app import cli
from engrain.cli.base import OnceCommand, OnceGroup
from engrain.cli.output import plural
from engrain.keys import KeyRing
from engrain.store import open_store

from .conftest import cli_env

Invoke = Callable[..., Result]

TABS = "I prefer tabs over spaces"
K8S = "The deploy target is Kubernetes on Google Cloud"
CONVERSATION = {
    "type": "conversation",
    "session_id": "s1",
    "turns": [
        {
            "speaker": "user",
            "text": "My daughter Emma starts university in Edinburgh this September.",
            "turn_id": "t1",
            "at": "2025-05-01T10:00:00+00:00",
        },
        {"speaker": "assistant", "text": "Congratulations to Emma!", "turn_id": "t2"},
    ],
}


@pytest.fixture
def invoke(runner: CliRunner, tmp_path: Path) -> Invoke:
    """Run ``engrain --url sqlite:///<tmp>/<db> ARGS`` (``ARGS`` alone when they give a
    ``--url``) with an environment of our own."""
    env = cli_env(tmp_path)

    def run(*args: str, input: str | None = None, db: str = "x.db", **extra_env: str) -> Result:
        return runner.invoke(
            cli,
            # a test's own --url replaces the file's: an option given twice is refused
            [*([] if "--url" in args else ["--url", f"sqlite:///{tmp_path / db}"]), *args],
            input=input,
            env={**env, **extra_env},
            catch_exceptions=False,  # an unexpected traceback fails the test
        )

    return run


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(result).stdout.splitlines()]


def remember(invoke: Invoke, text: str, *args: str) -> str:
    return json_lines(invoke("--json", "remember", text, *args))[0]["memory_id"]


# -- remember, get, list ---------------------------------------------------------------------


def test_remember_prints_outcome_and_id(invoke: Invoke) -> None:
    out = ok(invoke("remember", TABS, "--kind", "preference")).stdout.split()
    assert out[0] == "stored" and len(out[1]) == 32
    again = ok(invoke("remember", TABS, "--kind", "preference")).stdout.split()
    assert again == ["merged", out[1]]


def test_remember_json_and_options_reach_the_memory(invoke: Invoke) -> None:
    args = ["-k", "decision", "--project", "web", "-d", "Infra", "-d", "cloud", "--pin"]
    [outcome] = json_lines(invoke("--json", "remember", K8S, *args))
    assert outcome["action"] == "stored" and outcome["memory_type"] == "semantic"
    [memory] = json_lines(invoke("--json", "get", outcome["memory_id"]))
    assert memory["content"] == K8S
    assert memory["kind"] == "decision" and memory["project"] == "web"
    assert memory["domains"] == ["infra", "cloud"] and memory["pinned"] is True
    assert "embedding" not in memory


def test_remember_type_and_key(invoke: Invoke) -> None:
    mid = remember(invoke, "Answer in French", "--type", "procedural", "--key", "language")
    [memory] = json_lines(invoke("--json", "get", mid))
    assert memory["memory_type"] == "procedural" and memory["key"] == "language"


def test_get_text_shows_every_field(invoke: Invoke) -> None:
    mid = remember(invoke, K8S, "-d", "infra")
    out = ok(invoke("get", mid)).stdout
    assert f"id: {mid}\n" in out and f"content: {K8S}\n" in out
    assert 'domains: ["infra"]\n' in out and "pinned: False\n" in out


def test_list_filters_and_limit(invoke: Invoke) -> None:
    tabs = remember(invoke, TABS, "--kind", "preference")
    k8s = remember(invoke, K8S, "--project", "web")
    ids = lambda *args: [m["id"] for m in json_lines(invoke("--json", "list", *args))]  # noqa: E731
    assert ids() == [k8s, tabs]  # most recently updated first
    assert ids("--kind", "preference") == [tabs]
    assert ids("--type", "semantic") == [k8s]
    assert ids("--project", "web") == [k8s]
    assert ids("--limit", "1") == [k8s]
    text = ok(invoke("list")).stdout.splitlines()
    assert text[0].startswith(k8s) and K8S in text[0]
    assert "procedural/preference" in text[1]


def test_users_are_separate(invoke: Invoke) -> None:
    ok(invoke("-u", "ada", "remember", TABS))
    assert ok(invoke("list")).stdout == ""
    assert TABS in ok(invoke("--user", "ada", "list")).stdout
    assert TABS in ok(invoke("list", ENGRAIN_USER="ada")).stdout


# -- ingest ----------------------------------------------------------------------------------

NOTE = (
    "We decided to use Postgres for the billing service because we need strong "
    "consistency guarantees and the team already knows it well."
)
OTHER = "Last Tuesday Maria moved the staging cluster to Frankfurt after the outage in Dublin."


def test_ingest_text_and_stdin(invoke: Invoke) -> None:
    out = ok(invoke("ingest", NOTE, "--session", "s9")).stdout
    assert out.startswith("stored ")
    [outcome] = json_lines(invoke("--json", "ingest", "-", "--session", "s9", input=OTHER))
    assert outcome["action"] == "stored" and outcome["content"] == OTHER
    assert set(outcome) >= {"action", "memory_id", "reason", "importance", "memory_type"}
    [memory] = json_lines(invoke("--json", "get", outcome["memory_id"]))
    assert memory["session_id"] == "s9"
    # the same text again adds nothing new: its chunk is discarded, with the reason
    [again] = json_lines(invoke("--json", "ingest", NOTE))
    assert again["action"] == "discarded" and again["reason"].startswith("importance")
    assert ok(invoke("ingest", NOTE)).stdout.startswith("discarded  importance")


def test_ingest_type_hint(invoke: Invoke) -> None:
    [outcome] = json_lines(invoke("--json", "ingest", NOTE, "--type", "episodic"))
    assert outcome["memory_type"] == "episodic"


# -- recall and context ----------------------------------------------------------------------


@pytest.fixture
def two(invoke: Invoke) -> tuple[str, str]:
    return remember(invoke, TABS, "--kind", "preference"), remember(invoke, K8S)


def test_recall_text_and_json(invoke: Invoke, two: tuple[str, str]) -> None:
    result = ok(invoke("recall", "Kubernetes deploy target"))
    assert two[1] in result.stdout and "[SEMANTIC]" in result.stdout
    assert "tokens" in result.stderr
    rows = json_lines(invoke("--json", "recall", "Kubernetes deploy target"))
    assert {r["id"] for r in rows} == set(two)
    for row in rows:
        assert isinstance(row["score"], float) and isinstance(row["similarity"], float)
        assert row["tokens"] > 0 and row["content"] in (TABS, K8S)


def test_recall_options(invoke: Invoke, two: tuple[str, str]) -> None:
    only = json_lines(invoke("--json", "recall", "deploy", "--type", "procedural"))
    assert [r["id"] for r in only] == [two[0]]
    assert len(json_lines(invoke("--json", "recall", "deploy", "--top-k", "1"))) == 1
    assert json_lines(invoke("--json", "recall", "deploy", "--budget", "0")) == []
    assert len(json_lines(invoke("--json", "recall", "deploy", "--include-compressed"))) == 2


@pytest.mark.parametrize(("count", "noun", "shown"), [
    (1, "memory", "1 memory"), (2, "memory", "2 memories"), (0, "memory", "0 memories"),
    (1, "token", "1 token"), (0, "token", "0 tokens"), (1, "summary", "1 summary"),
    (3, "summary", "3 summaries"), (2, "API key", "2 API keys"), (2, "key", "2 keys"),
    (1, "id", "1 id"), (2, "id", "2 ids"),
])  # fmt: skip
def test_a_summary_counts_in_the_singular_for_one(count: int, noun: str, shown: str) -> None:
    """Every count a CLI summary prints goes through ``plural``: ``1 memory``, not
    ``1 memories`` (the context, import, forget and export summaries below hold it)."""
    assert plural(count, noun) == shown


def test_context_block_and_summary(invoke: Invoke, two: tuple[str, str]) -> None:
    result = ok(invoke("context", "Where do we deploy?"))
    assert result.stdout.startswith("<memory>\n") and f"[SEMANTIC] {K8S}" in result.stdout
    # the tabs preference is off-topic for deploying: it competes on relevance and stays out
    assert "1 memory, " in result.stderr and "tokens" in result.stderr and "ms" in result.stderr
    [ctx] = json_lines(invoke("--json", "context", "Where do we deploy?", "--top-k", "1"))
    assert set(ctx) == {
        "context_id",
        "id",
        "tier",
        "fallback",
        "text",
        "tokens",
        "elapsed_ms",
        "memories",
    }
    assert ctx["tier"] == 3 and ctx["fallback"] is False
    assert ctx["text"].startswith("<memory>") and ctx["tokens"] > 0
    assert len(ctx["memories"]) == 1 and "score" in ctx["memories"][0]


def test_context_for_a_user_without_memories_is_empty(invoke: Invoke) -> None:
    result = ok(invoke("context", "anything"))
    assert result.stdout == "" and "0 memories" in result.stderr


# -- curation --------------------------------------------------------------------------------


def test_pin_mute_and_off(invoke: Invoke, two: tuple[str, str]) -> None:
    tabs, k8s = two
    assert ok(invoke("pin", tabs)).stdout == f"pinned {tabs}\n"
    assert json_lines(invoke("--json", "pin", tabs, "--off"))[0]["pinned"] is False
    assert ok(invoke("mute", k8s)).stdout == f"muted {k8s}\n"
    assert "[muted]" in ok(invoke("list")).stdout
    assert [r["id"] for r in json_lines(invoke("--json", "recall", "deploy"))] == [tabs]
    assert json_lines(invoke("--json", "mute", k8s, "--off"))[0]["muted"] is False


def test_forget(invoke: Invoke, two: tuple[str, str]) -> None:
    assert ok(invoke("forget", two[0])).stdout == "forgot 1 of 1\n"
    assert ok(invoke("forget", two[1], two[1])).stdout == "forgot 1 of 2\n"  # one id, twice
    assert ok(invoke("list")).stdout == ""


def test_forget_an_unknown_id_exits_1(invoke: Invoke, two: tuple[str, str]) -> None:
    result = invoke("forget", "no-such-id")
    assert result.exit_code == 1
    assert result.stdout == "forgot 0 of 1\n"
    assert result.stderr == "error: 1 of 1 id is not a memory of user 'default'\n"
    # the known ones are forgotten all the same, as rm removes what exists
    partial = invoke("--json", "forget", two[0], "no-such-id")
    assert partial.exit_code == 1
    assert json.loads(partial.stdout) == {"forgotten": 1, "requested": 2}
    assert json.loads(partial.stderr)["error"] == "not_found"
    assert [m["id"] for m in json_lines(invoke("--json", "list"))] == [two[1]]
    # another user's memory is unknown to this one
    assert invoke("-u", "bob", "forget", two[1]).exit_code == 1
    assert [m["id"] for m in json_lines(invoke("--json", "list"))] == [two[1]]


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["remember", "   "], "empty"),
        (["remember", "x", "--kind", "bogus"], "'bogus'"),
        (["remember", "x", "--type", "bogus"], "'bogus'"),
        (["recall", "x", "--top-k", "0"], "top_k"),
        (["list", "--kind", "bogus"], "'bogus'"),
        (["ingest", "-"], "empty"),
    ],
)
def test_invalid_input_exits_2_with_a_clean_message(
    invoke: Invoke, args: list[str], message: str
) -> None:
    result = invoke(*args, input="")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["context", "x", "--budget", str(2**31)],
         "error: token_budget (--budget) must be >= 0 and <= 2,147,483,647, not 2,147,483,648"),
        (["recall", "x", "--top-k", "0"], "error: top_k (--top-k) must be >= 1"),
        (["context", "x", "--window", str(2**31)], "error: context_window (--window) must be"),
        (["remember", "x", "--domain", "d" * 257],
         "error: domains[0] (--domain) is longer than 256 characters"),
        (["-u", " ", "remember", "x"], "error: user_id (--user) is empty"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_option_a_command_line_spells_otherwise(
    invoke: Invoke, args: list[str], message: str
) -> None:
    """The engine names its fields (``token_budget``); a command's user changes ``--budget``."""
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1
    as_json = invoke("--json", *args)  # for programs: the engine's message as it is
    assert "(--" not in json.loads(as_json.stderr)["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["get", "nope"], "error: no memory 'nope' for user 'default'"),
        (["pin", "nope"], "error: no memory 'nope'"),
        (["mute", "nope", "--off"], "error: no memory 'nope'"),
        (["feedback", "nope", "--helpful"], "error: no context 'nope'"),
    ],
)
def test_unknown_ids_exit_1(invoke: Invoke, args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 1
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_errors_as_json(invoke: Invoke) -> None:
    result = invoke("--json", "remember", "")
    assert result.exit_code == 2
    error = json.loads(result.stderr)
    assert error["error"] == "empty_input" and error["status"] == 400
    assert "empty" in error["message"]
    missing = invoke("--json", "get", "nope")
    assert missing.exit_code == 1 and json.loads(missing.stderr)["error"] == "not_found"


def test_store_and_config_errors_exit_3(runner: CliRunner, tmp_path: Path) -> None:
    env = {"ENGRAIN_EMBEDDER": "hash", "ENGRAIN_DATA_DIR": str(tmp_path)}
    result = runner.invoke(cli, ["--url", "postgresql://nohost.invalid/x", "list"], env=env)
    assert result.exit_code == 3 and result.stderr.startswith("error: ")
    assert "PostgreSQL" in result.stderr
    bad = runner.invoke(cli, ["--json", "list"], env={**env, "ENGRAIN_EMBEDDER": "nope"})
    assert bad.exit_code == 3 and json.loads(bad.stderr)["status"] >= 500


@pytest.mark.parametrize(
    "env",
    [{"ENGRAIN_TOP_K": "abc"}, {"ENGRAIN_PROFILE": "fastest"}, {"ENGRAIN_NO_SUCH": "1"}],
)
def test_a_bad_setting_is_one_error_line_exit_3(invoke: Invoke, env: dict[str, str]) -> None:
    result = invoke("list", **env)
    if "ENGRAIN_NO_SUCH" in env:  # not a setting: ignored, with a warning line (a typo?)
        assert ok(result).stdout == ""
        assert result.stderr.splitlines() == [
            "warning: ENGRAIN_NO_SUCH is neither a setting nor a variable engrain reads: ignored"
        ]
        return
    assert result.exit_code == 3, result.stderr
    [line] = result.stderr.splitlines()
    name = next(iter(env)).removeprefix("ENGRAIN_").lower()
    assert line.startswith("error: ") and name in line
    assert "pydantic" not in line and "http" not in line  # no library dump, no web link
    assert result.stdout == ""


def test_a_bad_config_file_is_one_error_line_exit_3(invoke: Invoke, tmp_path: Path) -> None:
    config = tmp_path / "engrain.toml"
    config.write_text("top_k = [\n")
    result = invoke("list", ENGRAIN_CONFIG=str(config))
    assert result.exit_code == 3
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "engrain.toml" in line


#: Command lines click would run with one value silently dropped (it keeps the last).
LOSES_A_VALUE = [
    (["feedback", "c1", "--helpful", "--unhelpful"], "--helpful and --unhelpful contradict"),
    (["feedback", "c1", "--unhelpful", "--helpful"], "--unhelpful and --helpful contradict"),
    (["recall", "x", "--budget", "50", "--budget=80"], "--budget given 2 times"),
    (["recall", "x", "-n5", "--top-k", "6"], "-n/--top-k given 2 times"),
    (["remember", "x", "-u", "ada", "--user", "bob"], "-u/--user given 2 times"),
    (["-u", "ada", "-u", "bob", "list"], "-u given 2 times"),
    (["context", "x", "--window", "8000", "--window", "128000"], "--window given 2 times"),
    (["tiers", "show", "--tier", "1", "--tier", "2"], "--tier given 2 times"),
    (["keys", "create", "--admin", "--name", "a", "--name", "b"], "--name given 2 times"),
    (["serve", "--record", "--no-record"], "--record and --no-record contradict"),
    (["migrate", "--verify"], "--verify checks a copy: it goes with --from"),
    (["migrate", "--maintenance-work-mem", "1GB"], "it goes with --pool-graph"),
]


@pytest.mark.parametrize(("args", "said"), LOSES_A_VALUE)
def test_an_option_that_would_lose_a_value_is_a_usage_error(
    invoke: Invoke, args: list[str], said: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and said in line, line
    assert not result.stdout
    as_json = invoke("--json", *args)
    assert as_json.exit_code == 2
    assert json.loads(as_json.stderr)["error"] == "invalid_input"


def test_contradicting_feedback_writes_nothing(invoke: Invoke) -> None:
    first = remember(invoke, "Deploys go through the GitHub Actions release workflow")
    [ctx] = json_lines(invoke("--json", "context", "how do deploys work?", "--budget", "500"))
    assert invoke("feedback", ctx["context_id"], "--helpful", "--unhelpful").exit_code == 2
    assert invoke("feedback", "-m", first, "--unhelpful", "--helpful").exit_code == 2
    [memory] = json_lines(invoke("--json", "get", first))
    assert memory["usefulness"] == 0.5  # untouched: neither 0.6 nor 0.4


def test_what_loses_nothing_still_runs(invoke: Invoke) -> None:
    """A flag said twice, a repeatable option, and a global option before and after the
    command (after it wins) are not repeats."""
    mid = remember(invoke, TABS, "--pin", "--pin", "-d", "a", "-d", "b")
    assert json_lines(invoke("--json", "get", mid))[0]["domains"] == ["a", "b"]
    assert json_lines(invoke("-u", "ada", "--json", "list", "-u", "default")) != []
    assert ok(invoke("--json", "--json", "list"))


def test_every_command_refuses_repeated_options() -> None:
    """A command added later gets the check too: every one is a OnceCommand (or group)."""
    groups: list[click.Group] = [cli]  # type: ignore[list-item]
    while groups:
        group = groups.pop()
        assert isinstance(group, OnceGroup), group.name
        for command in group.commands.values():
            if isinstance(command, click.Group):
                groups.append(command)
            else:
                assert isinstance(command, OnceCommand), command.name


def test_usage_errors_exit_2(invoke: Invoke) -> None:
    assert invoke("remember").exit_code == 2
    assert invoke("forget").exit_code == 2
    assert invoke("recall", "x", "--top-k", "many").exit_code == 2
    assert invoke("import", "/no/such/file.jsonl").exit_code == 2
    assert invoke("export", "/no/such/dir/out.jsonl").exit_code == 2


def test_every_command_and_option_has_help(invoke: Invoke) -> None:
    listed = ok(invoke("--help")).stdout
    commands: dict[str, Any] = dict(cli.commands)  # type: ignore[attr-defined]
    commands |= {f"tiers {n}": c for n, c in commands["tiers"].commands.items()}
    for name, command in commands.items():
        assert command.help, name
        assert name.split()[0] in listed
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, (name, param.name)
        page = ok(invoke(*name.split(), "--help")).stdout
        assert page.startswith(f"Usage: cli {name}")
        assert "--user" in page and "--json" in page  # the global options, here too


# -- a missing extra: a set-up error, exit 3, one line naming the install ---------------------

#: (the module hidden, as if its extra were not installed; the command line; the extra)
MISSING_EXTRAS = [
    ("click", ["list"], "cli"),
    ("uvicorn", ["serve", "--port", "0"], "server"),
    ("fastapi", ["serve", "--port", "0"], "server"),
    ("mcp", ["mcp", "--user", "alice"], "server"),
    ("mcp", ["serve", "--port", "0"], "server"),  # /mcp imports it later: checked first
    ("psycopg", ["--url", "postgresql://localhost/engrain", "list"], "postgres"),
]


@pytest.mark.parametrize(("hidden", "args", "extra"), MISSING_EXTRAS)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_missing_extra_exits_3_with_the_install_command(
    tmp_path: Path, hidden: str, args: list[str], extra: str, as_json: bool
) -> None:
    """The README's table: 3 is a set-up failure; click's own 1 (and ``sys.exit(text)``'s)
    said nothing the table names."""
    argv = ["engrain", "--data-dir", str(tmp_path), *(["--json"] if as_json else []), *args]
    code = (f"import sys; sys.modules[{hidden!r}] = None; sys.argv = {argv!r}\n"
            "from engrain.cli import main; main()")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.splitlines()
    install = f"pip install 'engrain[{extra}]'"
    if as_json:
        error = json.loads(line)
        assert error["error"] == "config_error" and install in error["message"]
    else:
        assert line.startswith("error: ") and line.endswith(install)
    assert not proc.stdout
    if hidden == "click":
        assert line == f"error: {INSTALL_HINT}" or INSTALL_HINT in json.loads(line)["message"]


# -- import / export -------------------------------------------------------------------------


def test_export_import_round_trip_is_lossless(invoke: Invoke, tmp_path: Path) -> None:
    tabs = remember(invoke, TABS, "--kind", "preference", "--pin")
    remember(invoke, K8S, "-d", "infra", "--project", "web")
    ok(invoke("ingest", NOTE, "--session", "s2"))
    ok(invoke("-u", "bob", "remember", "Bob is allergic to peanuts"))
    ok(invoke("import", "-", input=json.dumps(CONVERSATION)))
    ok(invoke("mute", tabs))
    ok(invoke("recall", "deploy"))  # access counts and times must survive too
    first = tmp_path / "first.jsonl"
    result = ok(invoke("export", str(first), "--all-users"))
    assert result.stderr == "exported 5 memories\n"
    records = [json.loads(line) for line in first.read_text().splitlines()]
    assert {r["type"] for r in records} == {"memory"} and all(r["embedding"] for r in records)
    assert {r["user_id"] for r in records} == {"default", "bob"}

    imported = ok(invoke("import", str(first), db="fresh.db"))
    assert "imported 5 records: 5 memories restored" in imported.stdout
    again = ok(invoke("export", "--all-users", db="fresh.db")).stdout
    assert again == first.read_text()
    # without --all-users only --user's memories are exported
    assert len(ok(invoke("export", db="fresh.db")).stdout.splitlines()) == 4


def test_import_conversations_and_text(invoke: Invoke) -> None:
    lines = [
        json.dumps(CONVERSATION),
        "",
        json.dumps({"type": "text", "user_id": "bob", "text": NOTE}),
        json.dumps({**CONVERSATION, "session_id": "s2"}),  # a repeat: merged, not lost
    ]
    result = ok(invoke("--json", "import", "-", input="\n".join(lines) + "\n"))
    [summary] = json_lines(result)
    expected = {"records": 3, "memories": 0, "stored": 2, "merged": 1, "discarded": 0}
    assert {k: summary[k] for k in expected} == expected and not summary.get("states")
    assert result.stderr == ""  # no progress bar with --json
    [memory] = json_lines(invoke("--json", "list"))  # the record without user_id: --user's
    assert memory["session_id"] == "s1"
    assert memory["provenance"]["turn_ids"] == ["t1", "t2"]
    assert memory["event_at"] == "2025-05-01T10:00:00+00:00"
    assert memory["memory_type"] == "episodic" and "Emma" in memory["content"]
    [bobs] = json_lines(invoke("--json", "-u", "bob", "list"))
    assert bobs["content"] == NOTE


def test_import_text_summary_and_no_progress_off_a_terminal(invoke: Invoke) -> None:
    result = ok(invoke("import", "-", input=json.dumps(CONVERSATION)))
    assert result.stdout == (
        "imported 1 record: 0 memories restored, 1 stored, 0 merged, 0 discarded\n"
    )
    assert result.stderr == ""  # the progress bar is for terminals (tests/test_cli_terminal.py)


def test_import_malformed_line_names_it_and_writes_nothing(invoke: Invoke) -> None:
    text = json.dumps(CONVERSATION) + "\n\n{oops\n"
    result = invoke("import", "-", input=text)
    assert result.exit_code == 2
    assert result.stderr == (
        "error: line 3: invalid JSON: Expecting property name enclosed in double quotes at "
        "column 2\n"
    )
    assert ok(invoke("list")).stdout == ""
    control = invoke("import", "-", input='{"content": "a\tb"}\n')  # a raw tab in a string
    assert control.stderr == "error: line 1: invalid JSON: Invalid control character at column 15\n"
    not_object = invoke("--json", "import", "-", input="[1, 2]\n")
    assert not_object.exit_code == 2
    assert json.loads(not_object.stderr)["message"] == "line 1: expected a JSON object"


def test_import_of_json_nested_past_the_parsers_depth_exits_2(invoke: Invoke) -> None:
    """A line nested deeper than the JSON parser recurses is bad input (exit 2, its line
    named, nothing written), not a traceback (session 17, h8)."""
    good = json.dumps({"type": "text", "text": NOTE})
    for deep in ("[" * 100_000 + "]" * 100_000, '{"type": "text", "a": ' + "[" * 100_000):
        result = invoke("import", "-", input=f"{good}\n{deep}\n")
        assert result.exit_code == 2
        assert result.stderr == "error: line 2: JSON nested too deeply\n"
    assert ok(invoke("export", "--all-users")).stdout == ""


def test_import_of_a_number_too_long_to_convert_exits_2(invoke: Invoke) -> None:
    """An integer of more digits than Python converts (4,300) makes ``json`` raise a bare
    ``ValueError``: the line is bad input (exit 2, named, nothing written), not a traceback
    with exit 1 (session 24, h3)."""
    good = json.dumps({"type": "text", "text": NOTE})
    huge = '{"type": "remember", "content": "x", "access_count": ' + "9" * 5_000 + "}"
    result = invoke("import", "-", input=f"{good}\n{huge}\n")
    assert result.exit_code == 2
    assert result.stderr == "error: line 2: a number in the JSON has more than 4,300 digits\n"
    assert ok(invoke("export", "--all-users")).stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["remember"], "error: missing argument 'TEXT' (see 'cli remember --help')"),
        (["recall", "x", "--top-k", "many"],
         "error: invalid value for '--top-k' / '-n': 'many' is not a valid integer "
         "(see 'cli recall --help')"),
        (["tiers", "show", "--tier", "3"], "error: invalid value for '--tier' / '-t': '3' is "
                                           "not one of '1', '2' (see 'cli tiers show --help')"),
        (["no-such-command"], "error: no such command 'no-such-command' (see 'cli --help')"),
        (["list", "--bogus"], "error: no such option '--bogus'"),
        (["import", "/no/such/file.jsonl"], "error: invalid value for 'FILE|-': "),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_like_every_other_error(
    invoke: Invoke, args: list[str], message: str
) -> None:
    """click's own refusals printed a usage block and ``Error: …`` on three lines, and no
    JSON with ``--json``; the README promises one line, ``error: …`` (session 24, h3)."""
    result = invoke(*args)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(message), line
    assert result.stdout == ""
    as_json = invoke("--json", *args)
    assert as_json.exit_code == 2
    error = json.loads(as_json.stderr)
    assert error["error"] == "invalid_input" and error["status"] == 400
    assert line == f"error: {error['message']}"
    assert ok(invoke("--help")).stdout.startswith("Usage: cli [OPTIONS] COMMAND")  # still


def test_import_bad_record_names_its_line(invoke: Invoke) -> None:
    text = "\n" + json.dumps({"type": "conversation", "turns": []}) + "\n"
    result = invoke("import", "-", input=text)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: line 2: ") and "turn" in line
    unknown = invoke("import", "-", input='{"type": "video"}\n')
    assert unknown.exit_code == 2 and "unknown record type 'video'" in unknown.stderr
    assert unknown.stderr.startswith("error: line 1: ")


def test_explain_shows_classification_budget_and_verdicts(
    invoke: Invoke, two: tuple[str, str]
) -> None:
    result = ok(invoke("explain", "Where do we deploy?", "--all"))
    lines = result.stdout.splitlines()
    assert lines[0].startswith("complexity simple, intent question")
    assert lines[1] == "budget 750 tokens: simple: 500; history reference +50%: ×1.5 → 750"
    assert any(line.startswith("+ ") for line in lines)
    [report] = json_lines(invoke("--json", "explain", "thanks!"))
    assert report["budget"] == {"tokens": 0, "steps": ["trivial: 0"]}
    assert report["candidates"] == []
    bad = invoke("explain", "Where?", "--turn", "-1")
    assert bad.exit_code == 2 and "turn" in bad.stderr


# -- tiers --------------------------------------------------------------------------------------


def test_tiers_show_and_rebuild(invoke: Invoke) -> None:
    remember(invoke, "Never deploy on Fridays", "--kind", "invariant")
    remember(invoke, "Use early returns to keep nesting shallow", "--kind", "pattern")
    shown = ok(invoke("tiers", "show")).stdout
    assert shown.startswith("# tier 1: DNA summary (")
    assert "Never deploy on Fridays. Use early returns to keep nesting shallow." in shown
    assert "# tier 2: field guide" in shown and "## Rules (Never Violate)" in shown
    [only] = json_lines(invoke("--json", "tiers", "show", "--tier", "2"))
    assert only["tier"] == 2 and "- Never deploy on Fridays." in only["text"]
    assert only["tokens"] <= 2500 and len(only["memory_ids"]) == 2
    rebuilt = ok(invoke("tiers", "rebuild")).stdout.splitlines()
    assert rebuilt[0].startswith("tier 1: ") and rebuilt[1].startswith("tier 2: ")
    bad = invoke("tiers", "show", "--tier", "3")
    assert bad.exit_code == 2 and "'3' is not one of" in bad.stderr


def test_context_with_a_model_serves_the_compiled_tier(invoke: Invoke) -> None:
    remember(invoke, "Never deploy on Fridays", "--kind", "invariant")
    [cold] = json_lines(invoke("--json", "context", "can we deploy today?", "--model", "gpt-4"))
    assert cold["tier"] == 3 and cold["fallback"] is True  # compiled in the background
    [warm] = json_lines(invoke("--json", "context", "can we deploy today?", "--window", "8000"))
    assert warm["tier"] == 1 and warm["fallback"] is False
    assert warm["text"] == "<memory>\nNever deploy on Fridays.\n</memory>"
    assert warm["memories"][0]["content"] == "Never deploy on Fridays"
    text = ok(invoke("context", "can we deploy today?", "--model", "gpt-4"))
    assert text.stdout == "<memory>\nNever deploy on Fridays.\n</memory>\n"
    assert text.stderr.startswith("tier 1, ")
    unknown = invoke("context", "can we deploy today?", "--model", "nope-9000")
    assert unknown.exit_code == 2 and "unknown model" in unknown.stderr


# -- feedback, corrections, compression -----------------------------------------------------------


def test_feedback_on_a_context_and_on_memories(invoke: Invoke) -> None:
    first = remember(invoke, "Deploys go through the GitHub Actions release workflow")
    remember(invoke, "The release workflow needs the DEPLOY_TOKEN secret")
    [ctx] = json_lines(invoke("--json", "context", "how do deploys work?", "--budget", "500"))
    assert list(ctx)[:2] == ["context_id", "id"]  # HTTP's and MCP's name; the old one kept
    assert ctx["context_id"] == ctx["id"]
    rows = json_lines(invoke("--json", "feedback", ctx["context_id"], "--helpful"))
    assert {r["after"] for r in rows} == {0.6} and len(rows) == 2
    text = ok(invoke("feedback", "--memory", first, "--score", "0"))
    assert text.stdout == f"{first} usefulness 0.600 -> 0.480\n"
    missing = invoke("feedback", "nope", "--helpful")
    assert missing.exit_code == 1 and "no context" in missing.stderr
    both = invoke("feedback", ctx["id"], "--helpful", "--score", "1")
    assert both.exit_code == 2 and "exactly one" in both.stderr


def test_feedback_on_an_unknown_memory_exits_1_as_forget_does(invoke: Invoke) -> None:
    """The README's exit 1 for an unknown memory id (base: exit 0, nothing said); the
    known memory's feedback is recorded, as `forget` forgets the known ones."""
    first = remember(invoke, "Deploys go through the GitHub Actions release workflow")
    typo = invoke("feedback", "--memory", "nope", "--helpful")
    assert typo.exit_code == 1 and typo.stdout == ""
    assert typo.stderr == "error: 1 of 1 id is not a memory of user 'default'\n"
    mixed = invoke("--json", "feedback", "-m", first, "-m", "nope", "-m", "gone", "--helpful")
    assert mixed.exit_code == 1
    assert [json.loads(line) for line in mixed.stdout.splitlines()] == [
        {"memory_id": first, "before": 0.5, "after": 0.6}]  # fmt: skip
    assert json.loads(mixed.stderr)["message"] == "2 of 3 ids are not memories of user 'default'"
    [memory] = json_lines(invoke("--json", "get", first))
    assert memory["usefulness"] == 0.6


def test_remember_a_correction(invoke: Invoke) -> None:
    old = remember(invoke, "Lunch is at noon")
    out = ok(invoke("remember", "Lunch moved to 12:30", "--kind", "correction",
                    "--corrects", old))  # fmt: skip
    assert out.stdout.startswith("stored ") and out.stdout.endswith(f"(supersedes {old})\n")
    [memory] = json_lines(invoke("--json", "get", old))
    assert memory["superseded_by"] is not None


def test_compress_on_demand(invoke: Invoke) -> None:
    convo = {
        "type": "conversation",
        "session_id": "s1",
        "turns": [
            {"speaker": "Ann", "text": "We booked Yosemite for June 14, site 42.", "turn_id": "t1"}
        ],
    }
    ok(invoke("import", "-", input=json.dumps(convo) + "\n"))
    assert ok(invoke("compress")).stdout == (
        "compressed 0 sessions (0 memories) into 0 summaries\n"
    )
    [report] = json_lines(invoke("--json", "compress", "--force"))
    assert report["sessions"] == ["s1"] and report["compressed"] == 1
    assert report["summarized_by"] == ["extractive"]
    [summary] = json_lines(invoke("--json", "list", "--kind", "summary"))
    assert summary["source_session_id"] == "s1" and "June 14" in summary["content"]


def test_migrate_copies_another_store_losslessly(invoke: Invoke, tmp_path: Path) -> None:
    remember(invoke, "Deploys go through the GitHub Actions release workflow", "--pin")
    remember(invoke, "I prefer tabs over spaces", "--kind", "preference")
    ok(invoke("-u", "bob", "remember", "Bob's cat is called Miso"))
    ok(invoke("recall", "deploy"))
    secret = ok(invoke("keys", "create", "--user", "bob")).stdout.strip()
    [gone] = json_lines(invoke("--json", "keys", "create", "--admin"))
    [fresh] = json_lines(invoke("--json", "migrate", db="new.db"))
    assert fresh == {"applied": []}  # opening the store already brought it up to date
    source = f"sqlite:///{tmp_path / 'x.db'}"
    moved = ok(invoke("migrate", "--from", source, "--verify", db="new.db"))
    assert moved.stdout == (
        "schema current (0 migrations applied now); copied 3 memories of 2 users and 2 API keys\n"
    )
    before = ok(invoke("export", "--all-users")).stdout
    after = ok(invoke("export", "--all-users", db="new.db")).stdout
    assert after == before
    # the API keys moved with the store: the same secret works on the new one
    assert ok(invoke("keys", "list", db="new.db")).stdout == ok(invoke("keys", "list")).stdout
    moved_to = open_store(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        assert KeyRing(moved_to).authenticate(secret).users == ("bob",)
    finally:
        moved_to.close()
    ok(invoke("keys", "revoke", gone["id"]))  # a revocation after the move is carried over
    again = ok(invoke("migrate", "--from", source, db="new.db"))  # re-runnable
    assert "copied 3 memories" in again.stdout
    assert ok(invoke("export", "--all-users", db="new.db")).stdout == before
    assert ok(invoke("keys", "list", db="new.db")).stdout == ok(invoke("keys", "list")).stdout
    assert "revoked" in ok(invoke("keys", "list", db="new.db")).stdout


def test_migrate_from_a_sqlite_file_that_is_not_there_copies_nothing_and_says_so(
    invoke: Invoke, tmp_path: Path
) -> None:
    """It used to create an empty store at the mistyped path (relative to the working
    directory) and report success: "copied 0 memories"."""
    missing = tmp_path / "typo.db"
    result = invoke("migrate", "--from", f"sqlite:///{missing}")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: no SQLite store at {missing} to copy from (nothing copied; an absolute "
        "path takes four slashes: sqlite:////path/engrain.db)\n"
    )
    assert not missing.exists()


def test_migrate_moves_a_sqlite_store_into_postgres_losslessly(
    invoke: Invoke, tmp_path: Path, pg_url: str
) -> None:
    remember(invoke, "Deploys go through the GitHub Actions release workflow", "--pin")
    remember(invoke, "I prefer tabs over spaces", "--kind", "preference")
    ok(invoke("-u", "bob", "remember", "Bob's cat is called Miso"))
    ok(invoke("recall", "deploy"))  # an access count and time to carry over
    source = f"sqlite:///{tmp_path / 'x.db'}"
    # the last --url wins: the target is PostgreSQL
    moved = ok(invoke("--url", pg_url, "migrate", "--from", source, "--verify"))
    assert moved.stdout.endswith("copied 3 memories of 2 users and 0 API keys\n")
    ok(invoke("keys", "create", "--user", "bob"))
    once = ok(invoke("--url", pg_url, "migrate", "--from", source))
    assert once.stdout.endswith("copied 3 memories of 2 users and 1 API key\n")
    before = ok(invoke("export", "--all-users")).stdout
    assert ok(invoke("--url", pg_url, "export", "--all-users")).stdout == before
    found = json_lines(invoke("--url", pg_url, "--json", "recall", "which workflow deploys?"))
    assert any("GitHub Actions" in m["content"] for m in found)  # served from PostgreSQL


def test_migrate_fills_the_token_counts_a_large_postgres_table_left(
    invoke: Invoke, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    psycopg = pytest.importorskip("psycopg")
    from engrain.store.postgres import fill, schema

    for i in range(7):
        ok(invoke("--url", pg_url, "remember", f"release note {i}: the deploy moved to noon"))
    with psycopg.connect(pg_url, autocommit=True) as db:  # as migration 009 leaves a large table
        db.execute(f"ALTER TABLE memories DROP CONSTRAINT {fill.CONSTRAINT}")
        db.execute("UPDATE memories SET content_tokens = NULL")
    monkeypatch.setattr(schema, "FILL_IN_MIGRATION_MAX", 5)
    monkeypatch.setattr(fill.Filler, "start", lambda self: None)  # the command fills, not it
    filled = ok(invoke("--url", pg_url, "migrate"))
    assert filled.stdout == (
        "schema current (0 migrations applied now); filled the token counts of 7 memories\n"
    )
    [row] = json_lines(invoke("--url", pg_url, "--json", "migrate"))
    assert row == {"applied": [], "filled": 0}  # done, and recorded: nothing left
    with psycopg.connect(pg_url, autocommit=True) as db:
        left = db.execute("SELECT count(*) FROM memories WHERE content_tokens IS NULL")
        assert left.fetchone() == (0,)
        assert not fill.pending(db)


# -- global options anywhere ---------------------------------------------------------------------


def test_global_options_work_after_the_subcommand(invoke: Invoke, tmp_path: Path) -> None:
    ok(invoke("remember", TABS, "-u", "bob"))
    ok(invoke("remember", K8S, "--user", "ada", "--json"))
    assert ok(invoke("list")).stdout == ""  # neither went to the default user
    [bobs] = json_lines(invoke("list", "--json", "-u", "bob"))
    assert bobs["content"] == TABS and bobs["user_id"] == "bob"
    [adas] = json_lines(invoke("-u", "ada", "list", "--json"))
    assert adas["content"] == K8S
    other = f"sqlite:///{tmp_path / 'other.db'}"
    ok(invoke("remember", "Lunch is at noon", "--url", other))
    assert "Lunch is at noon" in ok(invoke("list", "--url", other)).stdout
    assert "Lunch" not in ok(invoke("list")).stdout
    shown = json_lines(invoke("tiers", "show", "--tier", "1", "--json", "-u", "bob"))
    assert shown[0]["tier"] == 1


def test_a_subcommand_option_wins_over_the_group_and_the_environment(invoke: Invoke) -> None:
    ok(invoke("-u", "ada", "remember", TABS, "-u", "bob"))
    assert TABS in ok(invoke("list", "-u", "bob")).stdout
    assert ok(invoke("list", "-u", "ada")).stdout == ""
    assert TABS in ok(invoke("list", "-u", "bob", ENGRAIN_USER="ada")).stdout
    assert ok(invoke("-u", "bob", "list", "-u", "ada", ENGRAIN_USER="bob")).stdout == ""
    # --json before the command stays on when the subcommand does not repeat it
    assert json_lines(invoke("--json", "list", "-u", "bob"))[0]["content"] == TABS


def test_data_dir_after_the_subcommand(runner: CliRunner, tmp_path: Path) -> None:
    env = {"ENGRAIN_EMBEDDER": "hash", "ENGRAIN_URL": None, "ENGRAIN_CONFIG": None,
           "ENGRAIN_DATA_DIR": str(tmp_path / "unused")}  # fmt: skip
    data = tmp_path / "mine"
    result = runner.invoke(cli, ["remember", TABS, "--data-dir", str(data)], env=env)
    assert result.exit_code == 0, result.stderr
    assert (data / "engrain.db").is_file() and not (tmp_path / "unused").exists()


# -- ingest and stdin --------------------------------------------------------------------------


def test_ingest_without_text_on_a_terminal_is_a_usage_error(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memories, "stdin_is_terminal", lambda: True)
    result = invoke("ingest", input=NOTE)
    assert result.exit_code == 2 and "missing TEXT" in result.stderr
    assert ok(invoke("list")).stdout == ""  # stdin was not read
    [outcome] = json_lines(invoke("--json", "ingest", "-", input=NOTE))  # - still reads it
    assert outcome["action"] == "stored"


def test_ingest_without_text_reads_a_pipe(invoke: Invoke) -> None:
    [outcome] = json_lines(invoke("--json", "ingest", input=NOTE))
    assert outcome["action"] == "stored" and outcome["content"] == NOTE


def test_ingest_of_stdin_that_is_not_utf8_exits_2(invoke: Invoke) -> None:
    result = invoke("ingest", "-", input=NOTE.encode() + b"\xff\xfe caf\xe9")  # type: ignore[arg-type]
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: stdin is not valid UTF-8 (byte 0xff at offset {len(NOTE.encode())})\n"
    )
    assert ok(invoke("list")).stdout == ""


@pytest.mark.parametrize("bad", ["caf\udce9", "\ud800", "ok\udcff"])
def test_arguments_that_are_not_utf8_exit_2(invoke: Invoke, bad: str) -> None:
    """Python hands undecodable argv bytes over as lone surrogates (surrogateescape)."""
    for args in (["remember", bad], ["remember", TABS, "-u", bad], ["ingest", bad]):
        result = invoke(*args)
        assert result.exit_code == 2, args
        [line] = result.stderr.splitlines()
        assert line.startswith("error: argument ") and "is not valid UTF-8" in line
    as_json = invoke("--json", "remember", bad)
    assert as_json.exit_code == 2 and json.loads(as_json.stderr)["error"] == "invalid_input"
    assert ok(invoke("export", "--all-users")).stdout == ""


def test_a_user_from_the_environment_that_is_not_utf8_exits_2(invoke: Invoke) -> None:
    result = invoke("remember", TABS, ENGRAIN_USER="b\udcffb")
    assert result.exit_code == 2
    assert result.stderr == "error: the user id is not valid UTF-8: b'b\\xffb'\n"


# -- import: users and encodings -----------------------------------------------------------------


def _memory_records(invoke: Invoke, tmp_path: Path) -> Path:
    """A file of alice's exported memories, and one record without a user."""
    ok(invoke("-u", "alice", "remember", TABS, db="alice.db"))
    ok(invoke("-u", "alice", "remember", K8S, db="alice.db"))
    path = tmp_path / "alice.jsonl"
    path.write_text(ok(invoke("-u", "alice", "export", db="alice.db")).stdout
                    + json.dumps({"type": "text", "text": NOTE}) + "\n")  # fmt: skip
    return path


def test_import_refuses_records_of_another_user_than_the_one_given(
    invoke: Invoke, tmp_path: Path
) -> None:
    path = _memory_records(invoke, tmp_path)
    for args, env in (((("-u", "bob")), {}), ((), {"ENGRAIN_USER": "bob"})):
        result = invoke(*args, "import", str(path), **env)
        assert result.exit_code == 2
        assert result.stderr == (
            "error: line 1: the record belongs to user 'alice', not 'bob' "
            "(--keep-users imports records under their own users)\n"
        )
        assert ok(invoke("export", "--all-users")).stdout == ""  # nothing written
    assert "--keep-users" in ok(invoke("import", "--help")).stdout


def test_import_keep_users_and_the_default_user(invoke: Invoke, tmp_path: Path) -> None:
    path = _memory_records(invoke, tmp_path)
    ok(invoke("import", str(path), "-u", "bob", "--keep-users"))
    assert {m["content"] for m in json_lines(invoke("--json", "list", "-u", "alice"))} == {
        TABS, K8S
    }  # fmt: skip
    [bobs] = json_lines(invoke("--json", "list", "-u", "bob"))  # the record without a user
    assert bobs["content"] == NOTE
    # with no user given, every record keeps its own and the rest go to 'default'
    ok(invoke("import", str(path), db="fresh.db"))
    assert len(json_lines(invoke("--json", "list", "-u", "alice", db="fresh.db"))) == 2
    assert json_lines(invoke("--json", "list", db="fresh.db"))[0]["content"] == NOTE
    # the records' own user, named explicitly, is accepted
    ok(invoke("-u", "alice", "import", str(path), db="third.db"))
    assert len(json_lines(invoke("--json", "list", "-u", "alice", db="third.db"))) == 3


def test_import_of_a_file_that_is_not_utf8_exits_2(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = json.dumps({"type": "text", "text": NOTE}).encode()
    path.write_bytes(good + b"\n" + '{"type": "text", "text": "café"}'.encode("latin-1") + b"\n")
    result = invoke("import", str(path))
    assert result.exit_code == 2
    assert result.stderr == "error: line 2 is not valid UTF-8 (byte 0xe9 at offset 29)\n"
    assert ok(invoke("export", "--all-users")).stdout == ""


def test_import_refuses_escaped_lone_surrogates(invoke: Invoke) -> None:
    good = json.dumps({"type": "text", "text": NOTE})
    for bad in (
        '{"type": "text", "text": "caf\\udce9"}',
        '{"type": "text", "\\ud800": 1}',
        '{"type": "conversation", "turns": [{"speaker": "u", "text": "\\udfff"}]}',
    ):
        result = invoke("import", "-", input=f"{good}\n{bad}\n")
        assert result.exit_code == 2, bad
        [line] = result.stderr.splitlines()
        assert line.startswith("error: line 2: ") and "is not valid UTF-8" in line
    assert ok(invoke("export", "--all-users")).stdout == ""


def test_import_accepts_a_byte_order_mark(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"type": "text", "text": NOTE}).encode())
    assert ok(invoke("import", str(path))).stdout.startswith("imported 1 record: ")


def test_export_counts_learned_state_apart_from_memories(invoke: Invoke, tmp_path: Path) -> None:
    remember(invoke, "Deploys go through the GitHub Actions release workflow")
    remember(invoke, "The release workflow needs the DEPLOY_TOKEN secret")
    [ctx] = json_lines(invoke("--json", "context", "how do deploys work?", "--budget", "500"))
    ok(invoke("feedback", ctx["id"], "--helpful"))  # teaches a co-occurring pair
    path = tmp_path / "all.jsonl"
    result = ok(invoke("export", str(path), "--all-users"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["type"] for r in records} == {"memory"}
    states = sum(len(r.get("state", ())) for r in records)
    assert states > 0
    assert result.stderr == f"exported 2 memories and {states} states\n"
    ok(invoke("import", str(path), db="fresh.db"))
    assert ok(invoke("export", "--all-users", db="fresh.db")).stdout == path.read_text()


def test_a_misspelt_variable_is_one_warning_line_naming_the_setting_meant(invoke: Invoke) -> None:
    result = ok(invoke("list", ENGRAIN_PROFILES="composite"))
    assert result.stderr.splitlines() == [
        "warning: ENGRAIN_PROFILES is neither a setting nor a variable engrain reads: ignored"
        " (did you mean ENGRAIN_PROFILE?)"
    ]
    as_json = ok(invoke("--json", "list", ENGRAIN_TOPK="3"))
    [line] = as_json.stderr.splitlines()
    assert json.loads(line) == {"warning": "ENGRAIN_TOPK is neither a setting nor a variable "
                                "engrain reads: ignored (did you mean ENGRAIN_TOP_K?)"}  # fmt: skip
