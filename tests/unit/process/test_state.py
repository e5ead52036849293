"""``PROCESS``: the pipeline is built once, atomically; a failed build is not retried per hook call."""

from __future__ import annotations

import logging
import threading

import pytest

from otel_verl import config
from otel_verl.process import exporters, telemetry
from otel_verl.process.state import ProcessState


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "state-run")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    for signal in ("TRACES", "METRICS", "LOGS"):
        monkeypatch.setenv(f"OTEL_{signal}_EXPORTER", "otlp_json_file")
    config.settings.cache_clear()
    yield monkeypatch
    config.settings.cache_clear()


def _otel_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("otel-verl") or "Processor" in t.name}


def test_a_build_that_fails_midway_stops_what_started_and_is_not_retried(env, caplog):
    calls = []
    real_reader = telemetry.StepMetricReader

    def failing_reader(*args, **kwargs):  # the span processor's thread has started by now
        calls.append(1)
        real_reader(*args, **kwargs).shutdown(1000)
        raise RuntimeError("metric reader broke")

    env.setattr(telemetry, "StepMetricReader", failing_reader)
    before = threading.active_count()
    state = ProcessState()
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        first = state.telemetry
        for _ in range(5):
            assert state.telemetry is first  # the no-op pipeline stays: no rebuild per hook call
    assert calls == [1]
    assert type(first.tracer_provider).__name__ == "NoOpTracerProvider"
    assert [r for r in caplog.records if "could not build" in r.getMessage()] != []
    deadline = threading.Event()
    for _ in range(20):  # the BatchSpanProcessor's worker ends once shut down
        if threading.active_count() <= before:
            break
        deadline.wait(0.1)
    assert threading.active_count() <= before, _otel_threads()


def test_exporters_are_looked_up_before_anything_starts(env):
    real = exporters.exporter_classes

    def lookup(signal):
        if signal == "logs":
            raise ValueError("no such exporter")
        return real(signal)

    env.setattr(exporters, "exporter_classes", lookup)
    before = threading.active_count()
    with pytest.raises(ValueError):
        telemetry.build_own(ProcessState().identity)
    assert threading.active_count() == before


def test_given_providers_are_kept_in_one_place(env):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    state = ProcessState()
    tp, mp = TracerProvider(), MeterProvider()
    state.use_providers(tp, mp)
    assert state.telemetry.tracer_provider is tp and state.telemetry.meter_provider is mp
    assert state.instruments is state.instruments  # built once per pipeline
    first = state.instruments
    state.use_providers(None, None)
    assert state._given is None and state._instruments is None  # noqa: SLF001
    assert state.telemetry.tracer_provider is not tp
    assert state.instruments is not first
    state.telemetry.shutdown(2)
