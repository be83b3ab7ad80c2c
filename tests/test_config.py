"""Settings: typed values from the environment and config files, one default per setting,
and a clean ConfigError naming each bad value and where it came from."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from engrain import ConfigError, EngrainError, Settings, load_settings
from engrain.config import BENCH_PREFIX, OTHER_VARIABLES, ConfigWarning
from engrain.feedback import FEEDBACK_RATE
from engrain.ingest.dedup import DICE_THRESHOLD
from engrain.ingest.importance import DISCARD_BELOW
from engrain.recall.assemble import Format
from engrain.recall.budget import Depth
from engrain.recall.gate import GateOptions
from engrain.recall.score import Profile


def env_of(tmp_path: Path, **variables: str) -> dict[str, str]:
    """An environment with nothing but a private data directory and ``variables``."""
    return {"ENGRAIN_DATA_DIR": str(tmp_path), **variables}


def config_error(tmp_path: Path, **variables: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env_of(tmp_path, **variables))
    return info.value.message


# -- typed values ----------------------------------------------------------------------------------


def test_enum_settings_take_their_string_values_from_the_environment(tmp_path: Path) -> None:
    env = env_of(tmp_path, ENGRAIN_PROFILE="static", ENGRAIN_PROMPT_FORMAT="sections",
                 ENGRAIN_DEPTH="rich")  # fmt: skip
    s = load_settings(environ=env)
    assert s.profile is Profile.STATIC
    assert s.prompt_format is Format.SECTIONS
    assert s.depth is Depth.RICH


def test_enum_settings_from_a_config_file_and_arguments(tmp_path: Path) -> None:
    config = tmp_path / "settings.toml"
    config.write_text('profile = "composite"\ndepth = "light"\nprompt_format = "sections"\n')
    s = load_settings({"depth": "rich"}, config_file=config, environ=env_of(tmp_path))
    assert (s.profile, s.depth, s.prompt_format) == (Profile.COMPOSITE, Depth.RICH,
                                                     Format.SECTIONS)  # fmt: skip
    assert Settings(profile="gated").profile is Profile.GATED  # type: ignore[arg-type]


def test_lists_and_mappings_from_the_environment(tmp_path: Path) -> None:
    s = load_settings(environ=env_of(tmp_path, ENGRAIN_FOCUS_AREAS="python, testing,",
                                     ENGRAIN_MODEL_WINDOWS='{"house-model": 16000}'))  # fmt: skip
    assert s.focus_areas == ("python", "testing")
    assert s.model_windows == {"house-model": 16000}


def test_precedence_argument_over_file_over_environment(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("top_k = 7\ntoken_budget = 900\n")
    env = env_of(tmp_path, ENGRAIN_TOP_K="3", ENGRAIN_TOKEN_BUDGET="100", ENGRAIN_HYBRID="false")
    s = load_settings({"token_budget": 1200}, environ=env)
    assert (s.top_k, s.token_budget, s.hybrid) == (7, 1200, False)


# -- one place per default -------------------------------------------------------------------------


def test_recall_settings_default_to_the_pipeline_defaults() -> None:
    assert GateOptions.from_settings(Settings(data_dir=Path("."))) == GateOptions()


def test_module_defaults_are_the_settings_defaults() -> None:
    s = Settings(data_dir=Path("."))
    assert s.feedback_rate == FEEDBACK_RATE
    assert s.dedup_threshold == DICE_THRESHOLD
    assert s.importance_threshold == DISCARD_BELOW


def test_gate_options_from_settings_carries_every_recall_setting(tmp_path: Path) -> None:
    s = load_settings(environ=env_of(
        tmp_path, ENGRAIN_PROFILE="composite", ENGRAIN_PROMPT_FORMAT="sections",
        ENGRAIN_DEPTH="light", ENGRAIN_PRIORITIZE_SPEED="true", ENGRAIN_FOCUS_AREAS="devops",
        ENGRAIN_HYBRID="0", ENGRAIN_LEXICAL_WEIGHT="0.5", ENGRAIN_CANDIDATE_POOL="80",
        ENGRAIN_RECALL_MIN_IMPORTANCE="0.4",
    ))  # fmt: skip
    assert GateOptions.from_settings(s) == GateOptions(
        profile=Profile.COMPOSITE, format=Format.SECTIONS, depth=Depth.LIGHT,
        prioritize_speed=True, focus_areas=("devops",), hybrid=False, lexical_weight=0.5,
        pool=80, min_importance=0.4,
    )  # fmt: skip


# -- clean errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ENGRAIN_TOP_K", "abc", "valid integer"),
        ("ENGRAIN_TOP_K", "0", "greater than or equal to 1"),
        ("ENGRAIN_TOKEN_BUDGET", "1.5", "valid integer"),
        ("ENGRAIN_PROFILE", "fastest", "'gated', 'composite' or 'static'"),
        ("ENGRAIN_PROMPT_FORMAT", "html", "'tagged' or 'sections'"),
        ("ENGRAIN_DEPTH", "deep", "'light', 'normal' or 'rich'"),
        ("ENGRAIN_EMBEDDER", "bert", "'minilm' or 'hash'"),
        ("ENGRAIN_HYBRID", "perhaps", "valid boolean"),
        ("ENGRAIN_LEXICAL_WEIGHT", "2", "less than or equal to 1"),
        ("ENGRAIN_LLM_TIMEOUT", "soon", "valid number"),
        ("ENGRAIN_MODEL_WINDOWS", "gpt=8000", "JSON object"),
        ("ENGRAIN_MODEL_WINDOWS", "[1, 2]", "JSON object"),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_variable_and_setting(
    tmp_path: Path, variable: str, value: str, expected: str
) -> None:
    [line] = config_error(tmp_path, **{variable: value}).splitlines()
    setting = variable.removeprefix("ENGRAIN_").lower()
    assert line.startswith(f"invalid {setting} from environment variable {variable}: ")
    assert expected in line
    assert "pydantic" not in line and "http" not in line and "For further" not in line


def test_every_bad_value_gets_its_own_line(tmp_path: Path) -> None:
    lines = config_error(tmp_path, ENGRAIN_TOP_K="x", ENGRAIN_DEPTH="deep",
                         ENGRAIN_MODEL_WINDOWS="{").splitlines()  # fmt: skip
    assert len(lines) == 3
    assert {line.split()[1] for line in lines} == {"top_k", "depth", "model_windows"}


def test_a_bad_environment_value_overridden_by_the_config_file_is_harmless(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text('model_windows = {m = 4000}\ndepth = "rich"\n')
    s = load_settings(environ=env_of(tmp_path, ENGRAIN_MODEL_WINDOWS="{", ENGRAIN_DEPTH="x"))
    assert s.model_windows == {"m": 4000} and s.depth is Depth.RICH


def test_config_file_problems_name_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('top_k = "5x"\ncolour = "blue"\nprofil = "static"\n[server]\nport = 1\n')
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env_of(tmp_path))
    assert info.value.message.splitlines() == [
        f"invalid top_k in config file {config}: input should be a valid integer, unable to "
        "parse string as an integer (got '5x')",
        f"unknown setting 'colour' in config file {config}",
        f"unknown setting 'profil' in config file {config} (did you mean 'profile'?)",
        f"unknown setting 'server' in config file {config}",
    ]


def test_an_unreadable_config_file_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"top_k = \xff\n")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(environ=env_of(tmp_path, ENGRAIN_CONFIG=str(config)))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(environ=env_of(tmp_path, ENGRAIN_CONFIG=str(tmp_path / "missing.toml")))


def test_settings_built_in_code_raise_config_error_too() -> None:
    """Unknown keys are refused (``extra="forbid"``), in code as in files."""
    with pytest.raises(ConfigError) as info:
        Settings(top_k=-1, prompt_format="html", colour="blue")  # type: ignore[arg-type, call-arg]
    assert isinstance(info.value, EngrainError)
    assert info.value.message.splitlines() == [
        "invalid top_k given as an argument: input should be greater than or equal to 1 (got -1)",
        "invalid prompt_format given as an argument: input should be 'tagged' or 'sections' "
        "(got 'html')",
        "unknown setting 'colour' given as an argument",
    ]


def test_arguments_are_named_as_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^invalid top_k given as an argument: "):
        load_settings({"top_k": "many"}, environ=env_of(tmp_path, ENGRAIN_TOP_K="3"))


def test_the_api_key_is_never_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"llm_api_key": ["sk-secret-value"]}, environ=env_of(tmp_path))
    message = info.value.message
    assert message.startswith("invalid llm_api_key given as an argument: ")
    assert "sk-secret-value" not in message


def test_a_misspelt_variable_warns_with_the_closest_name_and_changes_nothing(
    tmp_path: Path,
) -> None:
    environ = {"ENGRAIN_DATA_DIR": str(tmp_path), "ENGRAIN_PROFILES": "static"}
    with pytest.warns(ConfigWarning, match=r"ENGRAIN_PROFILES .*did you mean ENGRAIN_PROFILE\?"):
        settings = load_settings(environ=environ)
    assert settings.profile == load_settings(environ={"ENGRAIN_DATA_DIR": str(tmp_path)}).profile
    with pytest.warns(ConfigWarning) as far:
        load_settings(environ={"ENGRAIN_DATA_DIR": str(tmp_path), "ENGRAIN_XYZZY": "1"})
    assert "did you mean" not in str(far[0].message)  # no suggestion when nothing is close


def test_every_setting_and_other_variable_is_read_without_a_warning(tmp_path: Path) -> None:
    """The variables engrain reads itself (each setting, and those read outside the
    settings) never warn; other programs' variables (no ENGRAIN_ prefix) are not looked at."""
    environ = {name: "" for name in OTHER_VARIABLES if name != "ENGRAIN_CONFIG"}
    environ |= {"ENGRAIN_DATA_DIR": str(tmp_path), "ENGRAIN_PROFILE": "gated", "HOME": "/x",
                "ENGRAIN_BENCH_ANYTHING": "1"}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_settings(environ=environ)


def test_every_variable_the_code_reads_is_known() -> None:
    """A new ``ENGRAIN_*`` variable read in ``src/`` or ``bench/`` must be a setting, in
    ``OTHER_VARIABLES`` or a benchmark's, or every use of it would warn that it is
    misspelt."""
    root = Path(__file__).resolve().parents[1]
    files = [*(root / "src").rglob("*.py"), *(root / "bench").rglob("*.py")]
    quoted = r"[\"'`](ENGRAIN_[A-Z0-9_]*[A-Z0-9])[\"'`]"
    named = {n for f in files for n in re.findall(quoted, f.read_text(encoding="utf-8"))}
    settings = {"ENGRAIN_" + field.upper() for field in Settings.model_fields}
    assert named, "no ENGRAIN_ variable found in the code"
    benches = {name for name in named if name.startswith(BENCH_PREFIX)}
    assert named - settings - OTHER_VARIABLES - benches == set()
    assert OTHER_VARIABLES - named == set(), "a variable nothing reads any more"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENGRAIN_ANN_MIN_VECTORS", "abc"),
        ("ENGRAIN_ANN_MIN_VECTORS", "20k"),
        ("ENGRAIN_PG_LEARNINGS_MB", "1.5"),
        ("ENGRAIN_PG_PROJECTED_MB", "-3"),
        ("ENGRAIN_PG_WORKING_SET", "maybe"),
    ],
)
def test_a_number_read_outside_the_settings_that_does_not_parse_is_a_config_error(
    tmp_path: Path, variable: str, value: str
) -> None:
    """``ENGRAIN_ANN_MIN_VECTORS=abc`` once ran quietly with the default; now it is one line
    naming the variable and its value, reported with the settings before a store opens."""
    [line] = config_error(tmp_path, **{variable: value}).splitlines()
    assert line.startswith(f"invalid environment variable {variable}={value!r}: expected ")
    assert "on or off" in line


def test_a_named_value_read_outside_the_settings_takes_the_same_rule(tmp_path: Path) -> None:
    """``ENGRAIN_PG_POOL_INDEX``: unset is its default, its words name its values in any
    case, anything else is reported with the settings before a store opens."""
    from engrain import envvars

    variable = "ENGRAIN_PG_POOL_INDEX"
    assert envvars.choice(variable, {}) == "graph"  # the held graph by default (session 24)
    assert envvars.choice(variable, {variable: " "}) == "graph"
    for word in ("graph", "On", "HNSW"):
        assert envvars.choice(variable, {variable: word}) == "graph"
    for word in ("projection", "OFF"):
        assert envvars.choice(variable, {variable: word}) == "projection"
    [line] = config_error(tmp_path, **{variable: "ivf"}).splitlines()
    assert line == (f"invalid environment variable {variable}='ivf': expected graph or projection")
    assert load_settings(environ=env_of(tmp_path, **{variable: "graph"})).data_dir == tmp_path


def test_numbers_read_outside_the_settings_take_one_rule(tmp_path: Path) -> None:
    from engrain import envvars

    for variable in envvars.COUNTS:
        assert envvars.count(variable, {}) is None
        assert envvars.count(variable, {variable: "  "}) is None
        assert envvars.count(variable, {variable: " 12 "}) == 12
        assert envvars.count(variable, {variable: "0"}) == 0
        for word in ("on", "Yes", "TRUE"):
            assert envvars.count(variable, {variable: word}) is envvars.ON
        for word in ("off", "no", "False"):
            assert envvars.count(variable, {variable: word}) is envvars.OFF
        for bad in ("-1", "1.5", "1e3", "²", "lots"):
            with pytest.raises(ConfigError, match=variable):
                envvars.count(variable, {variable: bad})
    assert envvars.count("ENGRAIN_ANN_MIN_VECTORS", {"ENGRAIN_ANN_MIN_VECTORS": "exact"}) is (
        envvars.OFF
    )
    good = {variable: "on" for variable in envvars.COUNTS}
    assert load_settings(environ=env_of(tmp_path, **good)).data_dir == tmp_path
