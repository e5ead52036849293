"""Fault injection without a real run: our own code failing must not touch verl.

Each test forces one cause (a raising exporter, a raising wrapper, a malformed value, a verl
internal renamed in a future version) and checks that verl's call behaves exactly as without
otel-verl and that the cause is reported once, not once per call.
"""

from __future__ import annotations

import decimal
import fractions
import logging
import time

import numpy as np
import pytest
import torch
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from otel_verl import VerlInstrumentor, config, semconv
from otel_verl.hooks import compat
from otel_verl.hooks.hookset import Hook, HookSet
from otel_verl.process import exporters
from otel_verl.process.state import PROCESS
from otel_verl.version import __version__

CALLS = 5


def _ours(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("otel_verl") and r.levelno >= logging.WARNING]


@pytest.fixture
def tracking():
    from verl.utils.tracking import Tracking

    return Tracking(project_name="p", experiment_name="e", default_backend=["console"])


def _payload(step: int) -> dict:
    return {"actor/kl_loss": 0.1 * step, "critic/score/mean": 0.5, "perf/throughput": 100.0 + step}


# ---------------------------------------------------------------- a wrapper raising inside our code
def test_tracking_wrapper_raising_leaves_verl_unchanged_and_warns_once(captured, tracking, capsys, caplog, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("bug in otel-verl")

    monkeypatch.setattr(PROCESS.instruments.training, "record_log", boom)
    with caplog.at_level(logging.WARNING):
        results = [tracking.log(data=_payload(step), step=step) for step in range(1, CALLS + 1)]
        assert PROCESS.telemetry.drain()  # recorded in the background: the failure happens there
    assert results == [None] * CALLS  # what verl's Tracking.log returns
    out = capsys.readouterr().out
    assert all(f"step:{step}" in out for step in range(1, CALLS + 1))  # verl's console backend ran each time
    ours = _ours(caplog)
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert "Tracking.log" in ours[0].getMessage() and ours[0].exc_info is not None


def test_stage_wrapper_raising_keeps_verl_timing_and_warns_once(captured, v0_trainer, caplog, monkeypatch):
    from verl.utils.profiler import marked_timer

    def boom(*args, **kwargs):
        raise ValueError("bug in otel-verl")

    monkeypatch.setattr(PROCESS.instruments.training, "record_step_end", boom)
    timing: dict[str, float] = {}
    with caplog.at_level(logging.WARNING):
        for _ in range(CALLS):
            with marked_timer("step", timing):
                with marked_timer("gen", timing):
                    value = sum(range(1000))
        assert PROCESS.telemetry.drain()  # step-end metrics are recorded in the background
    assert value == 499500
    assert set(timing) == {"step", "gen"} and timing["gen"] > 0  # verl's own timing untouched
    assert len([s for s in captured.finished() if s.name == "verl.gen"]) == CALLS  # spans still ended
    assert len(_ours(caplog)) == 1


def test_tracer_raising_at_span_start_falls_back_to_plain_verl(captured, v0_trainer, caplog, monkeypatch):
    from verl.utils.profiler import marked_timer

    class BrokenTracer:
        def start_span(self, *args, **kwargs):
            raise RuntimeError("tracer broken")

    monkeypatch.setattr(PROCESS.telemetry, "tracer", BrokenTracer())
    timing: dict[str, float] = {}
    with caplog.at_level(logging.WARNING):
        for _ in range(CALLS):
            with marked_timer("step", timing):
                with marked_timer("gen", timing):
                    pass
    assert set(timing) == {"step", "gen"}
    assert captured.finished() == []
    assert len(_ours(caplog)) == 1


def test_stage_error_reaches_verl_unchanged_even_when_our_span_end_fails(captured, v0_trainer, monkeypatch):
    from verl.utils.profiler import marked_timer

    def broken_status(*args, **kwargs):
        raise ZeroDivisionError("bug in otel-verl's error recording")

    monkeypatch.setattr("otel_verl.hooks.spans.Status", broken_status)  # where end_span records errors
    err = KeyError("verl bug")
    with pytest.raises(KeyError) as info:
        with marked_timer("gen", {}):
            raise err
    assert info.value is err
    assert info.traceback[-1].name == "test_stage_error_reaches_verl_unchanged_even_when_our_span_end_fails"


# ---------------------------------------------------------------- malformed metric values
class _BadItem:
    def item(self):
        raise LookupError("no item")

    def numel(self):
        return 1


@pytest.mark.parametrize(
    "bad",
    [
        10**400,  # float() overflows
        complex(1, 2),
        decimal.Decimal("sNaN"),
        fractions.Fraction(10**400, 3),
        _BadItem(),
        torch.tensor([1.0, 2.0]),
        np.array([[1.0]]),
        float("nan"),
        object(),
        None,
    ],
    ids=[
        "huge-int",
        "complex",
        "decimal-snan",
        "huge-fraction",
        "item-raises",
        "2-elem-tensor",
        "1x1-array",
        "nan",
        "object",
        "none",
    ],
)
def test_malformed_value_does_not_cost_the_other_keys(captured, tracking, caplog, bad):
    data = {"actor/a": 1.0, "zz/bad": bad, "actor/kl_loss": 0.25, 7: 3.0}
    with caplog.at_level(logging.WARNING):
        assert tracking.log(data=data, step=1) is None
    points = captured.metric_points()
    assert points["verl.actor.a"][0].value == 1.0
    assert points["verl.actor.kl_loss"][0].value == 0.25  # logged after the bad value
    assert points[semconv.M_KL][0].value == 0.25
    assert _ours(caplog) == []


# ---------------------------------------------------------------- exporters raising
class RaisingSpanExporter(SpanExporter):
    calls = 0

    def export(self, spans):
        type(self).calls += 1
        raise ConnectionError("span exporter broken")

    def shutdown(self):
        pass


class RaisingMetricExporter(MetricExporter):
    calls = 0

    def __init__(self):
        super().__init__()

    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        type(self).calls += 1
        raise ConnectionError("metric exporter broken")

    def force_flush(self, timeout_millis=10_000):
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass


@pytest.fixture
def own_pipeline(monkeypatch, tmp_path):
    """The real per-process pipeline (build_own) with exporters that always raise."""
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "fault-run")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    monkeypatch.setattr(
        exporters,
        "exporter_classes",
        lambda signal: {"raising": RaisingSpanExporter if signal == "traces" else RaisingMetricExporter},
    )
    RaisingSpanExporter.calls = RaisingMetricExporter.calls = 0
    config.settings.cache_clear()
    monkeypatch.setattr(PROCESS, "_given", None)
    monkeypatch.setattr(PROCESS, "_telemetry", None)
    monkeypatch.setattr(PROCESS, "_instruments", None)
    instrumentor = VerlInstrumentor()
    instrumentor.instrument()
    try:
        yield
    finally:
        tel = PROCESS._telemetry
        instrumentor.uninstrument()
        if tel is not None:
            tel.shutdown(2)
        config.settings.cache_clear()


def _wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_exporters_raising_leave_training_unaffected_and_warn_once(own_pipeline, v0_trainer, tracking, caplog):
    from verl.utils.profiler import marked_timer

    with caplog.at_level(logging.WARNING):
        for step in range(1, CALLS + 1):
            timing: dict[str, float] = {}
            with marked_timer("step", timing):
                with marked_timer("gen", timing):
                    pass
            assert tracking.log(data=_payload(step), step=step) is None
            assert set(timing) == {"step", "gen"}
        assert _wait_for(lambda: RaisingMetricExporter.calls >= CALLS)  # every step was tried
        assert _wait_for(lambda: RaisingSpanExporter.calls >= 1)
        start = time.monotonic()
        PROCESS.telemetry.flush(2.0)
        assert time.monotonic() - start < 2.5
    ours = [r for r in _ours(caplog) if "export" in r.getMessage()]
    assert len(ours) == 1, [r.getMessage() for r in _ours(caplog)]
    assert "metric export" in ours[0].getMessage()


# ---------------------------------------------------------------- a verl internal renamed
def test_renamed_verl_internal_is_reported_once_with_the_verl_version(caplog):
    import importlib.metadata

    import verl.utils.tracking  # noqa: F401 - already imported: hooks apply at once

    version = importlib.metadata.version("verl")
    calls = []

    def wrapper(wrapped, instance, args, kwargs):
        calls.append(1)
        return wrapped(*args, **kwargs)

    hooks = HookSet(
        [
            Hook("verl.utils.tracking", "Tracking.log_v2", wrapper),  # method renamed
            Hook("verl.utils.tracking", "TrackingV2.log", wrapper),  # class renamed
            Hook("verl.utils.tracking", "Tracking.log_v3", wrapper, optional=True),  # known to vary: quiet
        ]
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # instrument/uninstrument cycles: still one table, said once
            hooks.install()
            hooks.uninstall()
        compat.REPORT.say()
        compat.REPORT.say()
    (table,) = [r.getMessage() for r in _ours(caplog)]
    assert table.startswith(f"otel-verl {__version__} on verl {version}: hooks 2 skipped, 1 absent")
    for target in ("Tracking.log_v2 missing", "TrackingV2 missing"):
        assert target in table
    assert hooks.applied == [] and calls == []
    from verl.utils.tracking import Tracking

    assert not hasattr(Tracking.log, "__wrapped__")  # nothing left half-patched
