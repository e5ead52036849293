"""``OTEL_VERL_*`` parsing: bad values warn once, name the variable and fall back."""

from __future__ import annotations

import logging
import os
import re

import pytest

from otel_verl import config


@pytest.fixture(autouse=True)
def _fresh_settings():
    config.settings.cache_clear()
    yield
    config.settings.cache_clear()


def test_defaults(monkeypatch):
    for var in (config.SHUTDOWN_TIMEOUT, config.FORWARD_METRICS, config.STEP_EXPORT, config.RAY_RUNTIME_ENV):
        monkeypatch.delenv(var, raising=False)
    s = config.settings()
    assert (s.shutdown_timeout_s, s.forward_metrics, s.step_export, s.ray_runtime_env) == (5.0, True, True, True)


@pytest.mark.parametrize(
    ("var", "raw", "field", "default"),
    [
        (config.SHUTDOWN_TIMEOUT, "soon", "shutdown_timeout_s", 5.0),
        (config.SHUTDOWN_TIMEOUT, "-3", "shutdown_timeout_s", 5.0),
        (config.SHUTDOWN_TIMEOUT, "nan", "shutdown_timeout_s", 5.0),
        (config.FORWARD_METRICS, "maybe", "forward_metrics", True),
        (config.STEP_EXPORT, "2", "step_export", True),
    ],
)
def test_bad_value_warns_and_falls_back(monkeypatch, caplog, var, raw, field, default):
    monkeypatch.setenv(var, raw)
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        value = getattr(config.settings(), field)
    assert value == default
    assert var in caplog.text and repr(raw) in caplog.text and repr(default) in caplog.text


@pytest.mark.parametrize(("raw", "expected"), [("0", False), ("false", False), ("ON", True), ("yes", True)])
def test_bool_values(monkeypatch, raw, expected):
    monkeypatch.setenv(config.STEP_EXPORT, raw)
    assert config.settings().step_export is expected


def test_the_spool_folder_is_per_user_on_node_local_disk_unless_set(monkeypatch, tmp_path):
    monkeypatch.delenv(config.SPOOL_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(config.FILE_DIR, "out")
    assert config.spool_root() == f"/var/tmp/otel-verl-spool-{os.geteuid()}"  # not in the launch folder
    config.settings.cache_clear()
    monkeypatch.setenv(config.SPOOL_DIR, "elsewhere")
    assert config.spool_root() == str(tmp_path / "elsewhere")


def test_run_id_is_created_once_and_file_dir_made_absolute(monkeypatch, tmp_path):
    # setenv then delenv: monkeypatch then restores "unset" after ensure_run_id() sets it
    monkeypatch.setenv(config.RUN_ID, "placeholder")
    monkeypatch.delenv(config.RUN_ID)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(config.FILE_DIR, "out")
    run_id = config.ensure_run_id()
    assert run_id and config.ensure_run_id() == run_id
    assert config.settings().file_dir == str(tmp_path / "out")


# ------------------------------------------------------------------ every OTEL_VERL_* variable
def _defined_variables() -> dict[str, str]:
    """Every ``OTEL_VERL_*`` setting ``otel_verl.config`` defines (constant name -> variable); the
    variables of the commands (``TOOL_VARIABLES``) are no settings."""
    tools = {t.name for t in config.TOOL_VARIABLES}
    return {
        name: value
        for name, value in vars(config).items()
        if name.isupper() and isinstance(value, str) and value.startswith("OTEL_VERL_") and value not in tools
    }


# variable -> (an invalid value, Settings field, the default it falls back to, how the warning shows it)
INVALID = {
    config.UNTESTED_VERL: ("if you must", "untested_verl", True, "True"),
    config.SHUTDOWN_TIMEOUT: ("soon", "shutdown_timeout_s", 5.0, "5.0"),
    config.FORWARD_METRICS: ("maybe", "forward_metrics", True, "True"),
    config.STEP_EXPORT: ("2", "step_export", True, "True"),
    config.RAY_RUNTIME_ENV: ("sometimes", "ray_runtime_env", True, "True"),
    config.RAY_RUNTIME_ENV_SECRETS: ("yes please", "ray_runtime_env_secrets", False, "False"),
    config.RAY_SYSTEM_METRICS: ("maybe", "ray_system_metrics", False, "False"),
    config.ROLLOUT_SPANS_PER_STEP: ("-2", "rollout_spans_per_step", 64, "64"),
    config.ROLLOUT_SLOWEST_PER_STEP: ("0", "rollout_slowest_per_step", 8, "8"),
    config.ENGINE_TRACING: ("sometimes", "engine_tracing", "auto", "'auto'"),
    config.GPU_METRICS: ("nvml", "gpu_metrics", True, "True"),
    config.PROCESS_METRICS: ("enabled!", "process_metrics", True, "True"),
    config.LOG_LEVEL: ("LOUD", "log_level", logging.WARNING, "'WARNING'"),
    config.SAMPLES: ("perhaps", "samples", False, "False"),
    config.SAMPLES_EVERY_N_STEPS: ("0", "samples_every_n_steps", 10, "10"),
    config.SAMPLES_PER_STEP: ("four", "samples_per_step", 4, "4"),
    config.SAMPLES_MAX_CHARS: ("-5", "samples_max_chars", 2000, "2000"),
    config.GUARD_ACTION: ("pause", "guard_action", "alert", "'alert'"),
    config.GUARD_ACTIONS_BY_RULE: ("kl_blowup", "guard_actions", (), "the others apply"),  # no =action
    config.GUARD_RESUME: ("latest", "guard_resume", "last_good", "'last_good'"),
    config.STALL_AFTER: ("soon", "stall_after_s", None, "'auto'"),
    config.SPOOL: ("disk", "spool", True, "True"),
    config.SPOOL_MAX_MB: ("lots", "spool_max_mb", 512.0, "512.0"),
    config.GUARD_EXIT_CODE: ("130", "guard_exit_code", 0, "0"),  # 128 + signal: not a code of ours
}
# Free-form values: any string is valid, so there is no invalid value; empty means the default.
FREE_FORM = {
    config.RUN_ID: ("run_id", None),
    config.PROJECT: ("project", None),
    config.EXPERIMENT: ("experiment", None),
    config.FILE_DIR: ("file_dir", config.DEFAULT_FILE_DIR),
    config.GUARD_RULES: ("guard_rules", None),  # a path; an unusable file is judged when it is read
    config.SPOOL_DIR: ("spool_dir", None),  # a path; an unusable folder turns the spool off when it is used
    config.OTLP_HEADERS_FILE: ("otlp_headers_file", None),  # a path, likewise (process/otlp_headers.py)
    config.GUARD_MARKER: ("guard_marker", None),  # a path; one that cannot be written is said when it is
}


def test_one_table_lists_every_variable_and_every_setting():
    """settings() and ``otel-verl doctor`` read config.VARIABLES: it must hold every variable and field."""
    import dataclasses

    assert {v.name for v in config.VARIABLES} == set(_defined_variables().values())
    assert sorted(v.field for v in config.VARIABLES) == sorted(f.name for f in dataclasses.fields(config.Settings))
    for v in config.VARIABLES:
        assert getattr(config.settings(), v.field) == v.default or v.name in os.environ, v.name


def test_every_variable_has_a_bad_value_case():
    """A new ``OTEL_VERL_*`` variable in config.py fails here until it gets a case above."""
    defined = set(_defined_variables().values())
    assert defined == set(INVALID) | set(FREE_FORM), defined ^ (set(INVALID) | set(FREE_FORM))
    assert not set(INVALID) & set(FREE_FORM)


@pytest.mark.parametrize("var", config.VARIABLES, ids=lambda v: v.name)
def test_every_setting_is_documented(var):
    """The configuration page is written from these (scripts/gen_docs.py; tests/docs checks it is up to date)."""
    assert len(var.doc) > 20 and var.doc.endswith((".", ")")), var.name
    assert var.group in config.GROUPS, var.name
    assert var.default_text(), var.name


def test_every_otel_verl_variable_the_package_reads_is_documented():
    """A variable a module reads by name without a row on the configuration page fails here."""
    from pathlib import Path

    package = Path(config.__file__).parent
    named = set()
    for path in package.rglob("*.py"):
        named |= set(re.findall(r"OTEL_VERL_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    documented = {v.name for v in config.VARIABLES} | {t.name for t in config.TOOL_VARIABLES}
    assert named - documented == set()


@pytest.mark.parametrize("var", sorted(_defined_variables().values()))
def test_invalid_value_warns_naming_the_variable_and_uses_the_default(monkeypatch, caplog, var):
    for other in _defined_variables().values():
        monkeypatch.delenv(other, raising=False)
    if var in FREE_FORM:
        field, default = FREE_FORM[var]
        monkeypatch.setenv(var, "")
        with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
            assert getattr(config.settings(), field) == default
        config.settings.cache_clear()
        monkeypatch.setenv(var, "any value / with spaces")
        assert getattr(config.settings(), field) == "any value / with spaces"
        assert caplog.records == []
        return
    raw, field, default, shown = INVALID[var]
    monkeypatch.setenv(var, raw)
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        value = getattr(config.settings(), field)
    assert value == default
    ours = [r for r in caplog.records if r.name == "otel_verl.config"]
    assert len(ours) == 1, [r.getMessage() for r in ours]  # one warning, for this variable only
    message = ours[0].getMessage()
    assert var in message and repr(raw) in message and shown in message
    # every other setting kept its default
    config.settings.cache_clear()
    monkeypatch.delenv(var)
    clean = config.settings.__wrapped__()
    monkeypatch.setenv(var, raw)
    bad = config.settings.__wrapped__()
    for other in clean.__dataclass_fields__:
        if other != field:
            assert getattr(bad, other) == getattr(clean, other), other


# ------------------------------------------------------------------ hostile values
# What each setting may be, whatever the environment says (docs/configuration.md).
RANGES = {
    config.SHUTDOWN_TIMEOUT: (0.0, 300.0),
    config.ROLLOUT_SPANS_PER_STEP: (-1, 100_000),
    config.ROLLOUT_SLOWEST_PER_STEP: (1, 100_000),
    config.LOG_LEVEL: (0, 50),
    config.SAMPLES_EVERY_N_STEPS: (1, 1_000_000),
    config.SAMPLES_PER_STEP: (1, 10_000),
    config.SAMPLES_MAX_CHARS: (1, 1_000_000),
    config.SPOOL_MAX_MB: config.SPOOL_MAX_MB_RANGE,
    config.GUARD_EXIT_CODE: (0, config.GUARD_EXIT_CODE_MAX),
}
HOSTILE = [
    "²",  # str.isdigit() says yes, int() says no
    "٣",  # an Arabic-Indic digit: int() takes it
    "１２",  # full-width digits
    "1_000",
    "0x10",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e308",
    "1e309",
    "-1e308",
    "1e12",
    "1e-300",
    "-0",
    "-0.0",
    "-1",
    "99999999999999999999999999",
    "9" * 5000,
    "a" * 100_000,
    "TRUE ",
    "\tINFO",
    "DEBUG\u200b",
    "Level 5",
    "60",
    "off",
    "auto",
    "stop",
    "\udcff\udcfe",  # bytes that are not UTF-8, as os.environ shows them
    "\x1b[31mred",
    "a\nb",
]


def _check(s: config.Settings) -> None:
    for v in config.VARIABLES:
        value = getattr(s, v.field)
        if v.name in RANGES:
            low, high = RANGES[v.name]
            assert isinstance(value, type(v.default)) and low <= value <= high, (v.name, value)
        elif v.name == config.STALL_AFTER:
            assert value is None or value == 0.0 or config.STALL_AFTER_MIN_S <= value <= config.STALL_AFTER_MAX_S
        elif isinstance(v.default, bool):
            assert isinstance(value, bool), (v.name, value)
        elif v.name == config.GUARD_ACTION:
            assert value in (*config.GUARD_RULE_ACTIONS, "off")  # an alias comes as the action it names
        elif v.name == config.GUARD_ACTIONS_BY_RULE:
            assert isinstance(value, tuple), value
            for pattern, action in value:
                assert action in (*config.GUARD_RULE_ACTIONS, "off") and pattern and pattern.isprintable()
        elif v.name == config.GUARD_RESUME:
            assert value in config.GUARD_RESUMES
        else:  # free-form text: bounded, printable (it goes into file names and every span's resource)
            assert value == v.default or (len(value) <= config.MAX_VALUE_CHARS and value.isprintable()), v.name
            assert value is None or value.encode("utf-8")


@pytest.mark.parametrize("var", [v.name for v in config.VARIABLES])
def test_settings_never_raise_and_stay_in_range_whatever_the_value(monkeypatch, caplog, var):
    for raw in HOSTILE:
        monkeypatch.setenv(var, raw)
        config.settings.cache_clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
            s = config.settings()
        _check(s)
        ours = [r for r in caplog.records if r.name == "otel_verl.config"]
        assert len(ours) <= 1, (raw, [r.getMessage() for r in ours])
        if ours:
            assert var in ours[0].getMessage() and len(ours[0].getMessage()) < 400  # a bad value is shown cut
    # NUL cannot be in a real environment; an environ mapping can hand it over all the same
    monkeypatch.setattr(os, "environ", {**os.environ, var: "5\x00"})
    config.settings.cache_clear()
    _check(config.settings())


@pytest.mark.parametrize(
    ("var", "raw", "field", "default"),
    [
        (config.SHUTDOWN_TIMEOUT, "1e12", "shutdown_timeout_s", 5.0),  # would overflow threading's timeouts
        (config.SHUTDOWN_TIMEOUT, "301", "shutdown_timeout_s", 5.0),
        (config.STALL_AFTER, "1e-300", "stall_after_s", None),  # a stall every poll
        (config.STALL_AFTER, "9.5", "stall_after_s", None),
        (config.LOG_LEVEL, "²", "log_level", logging.WARNING),
        (config.SAMPLES_MAX_CHARS, "10000000000", "samples_max_chars", 2000),
        (config.SPOOL_MAX_MB, "0", "spool_max_mb", 512.0),  # no room: use OTEL_VERL_SPOOL=off
    ],
)
def test_values_out_of_range_warn_with_the_range(monkeypatch, caplog, var, raw, field, default):
    monkeypatch.setenv(var, raw)
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        assert getattr(config.settings(), field) == default
    assert var in caplog.text and "allowed:" in caplog.text


@pytest.mark.parametrize(
    ("var", "raw", "field", "value"),
    [
        (config.SHUTDOWN_TIMEOUT, "300", "shutdown_timeout_s", 300.0),
        (config.SHUTDOWN_TIMEOUT, "0", "shutdown_timeout_s", 0.0),
        (config.SHUTDOWN_TIMEOUT, " 2.5 ", "shutdown_timeout_s", 2.5),
        (config.STALL_AFTER, "10", "stall_after_s", 10.0),
        (config.STALL_AFTER, "0", "stall_after_s", 0.0),
        (config.STALL_AFTER, "off", "stall_after_s", 0.0),
        (config.LOG_LEVEL, "20", "log_level", 20),
        (config.LOG_LEVEL, "debug", "log_level", logging.DEBUG),
        (config.ROLLOUT_SPANS_PER_STEP, "-1", "rollout_spans_per_step", -1),
        (config.ROLLOUT_SLOWEST_PER_STEP, "1", "rollout_slowest_per_step", 1),
        (config.ROLLOUT_SLOWEST_PER_STEP, "100000", "rollout_slowest_per_step", 100_000),
        (config.SPOOL_MAX_MB, "0.01", "spool_max_mb", 0.01),
        (config.SPOOL, "off", "spool", False),
    ],
)
def test_values_at_the_edges_of_their_range_are_taken(monkeypatch, caplog, var, raw, field, value):
    monkeypatch.setenv(var, raw)
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        assert getattr(config.settings(), field) == value
    assert [r for r in caplog.records if r.name == "otel_verl.config"] == []


def test_guard_actions_per_rule_keep_the_good_entries_and_name_the_bad_ones_once(monkeypatch, caplog):
    raw = " kl_blowup=stop, grad_norm_*=ALERT ,old=observe,,=stop,y=,z,w=explode,n=off"
    monkeypatch.setenv(config.GUARD_ACTIONS_BY_RULE, raw)
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        got = config.settings().guard_actions
    assert got == (("kl_blowup", "stop"), ("grad_norm_*", "alert"), ("old", "alert"), ("n", "off"))
    (record,) = [r for r in caplog.records if r.name == "otel_verl.config"]
    message = record.getMessage()
    assert "ignoring 4 entries of OTEL_VERL_GUARD_ACTIONS: '=stop', 'y=', 'z', ..." in message
    assert "record, alert, checkpoint, stop, off" in message


def test_the_former_guard_action_observe_is_alert(monkeypatch, caplog):
    monkeypatch.setenv(config.GUARD_ACTION, "Observe")
    with caplog.at_level(logging.WARNING, logger="otel_verl.config"):
        assert config.settings().guard_action == "alert"
    assert caplog.records == []
