"""``OTEL_VERL_*`` parsing: bad values warn once, name the variable and fall back."""

from __future__ import annotations

import logging

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


def test_run_id_is_created_once_and_file_dir_made_absolute(monkeypatch, tmp_path):
    # setenv then delenv: monkeypatch then restores "unset" after ensure_run_id() sets it
    monkeypatch.setenv(config.RUN_ID, "placeholder")
    monkeypatch.delenv(config.RUN_ID)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(config.FILE_DIR, "out")
    run_id = config.ensure_run_id()
    assert run_id and config.ensure_run_id() == run_id
    assert config.settings().file_dir == str(tmp_path / "out")
