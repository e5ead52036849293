"""verl's ``rl_insight`` logger beside otel-verl (``otel_verl.hooks.rl_insight``).

RL-Insight 0.3's monitor hub builds a tracer provider of its own: these tests pin what
docs/coexistence.md says of it (never the global provider; the SDK's OTLP header variables go to
its endpoint), on the installed ``rl-insight``, and otel-verl's one warning about those headers.
The real trainer with RL-Insight beside otel-verl: tests/e2e/test_next_verl.py."""

from __future__ import annotations

import time

import pytest
from opentelemetry import trace
from support.components import require_module
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import config
from otel_verl.hooks import ray_launch, rl_insight

SECRET = "hub-SECRET-31c5"


@pytest.fixture
def fresh_warnings(monkeypatch):
    return monkeypatch


def test_the_launcher_says_once_that_rl_insight_gets_the_otlp_headers_naming_never_the_value(fresh_warnings, caplog):
    env = {rl_insight.ENABLE_ENV: "1", "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{SECRET}"}
    with caplog.at_level("WARNING", logger="otel_verl"):
        rl_insight.warn_shared_headers(env)
        rl_insight.warn_shared_headers({**env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=k"})
    (record,) = caplog.records
    assert "rl_insight logger is on and OTEL_EXPORTER_OTLP_HEADERS is set" in record.getMessage()
    assert config.OTLP_HEADERS_FILE in record.getMessage()
    assert SECRET not in caplog.text


def test_the_launchers_ray_init_says_it_after_verl_turned_the_logger_on(fresh_warnings, caplog):
    """verl's ``main_ppo`` sets ``VERL_RL_INSIGHT_ENABLE=1`` just before ``ray.init``: the hook there says it."""
    fresh_warnings.setenv(rl_insight.ENABLE_ENV, "1")
    fresh_warnings.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"x-api-key={SECRET}")
    fresh_warnings.setattr(ray_launch, "_starts_local_cluster", lambda kw: False)
    with caplog.at_level("WARNING", logger="otel_verl"):
        assert ray_launch._ray_init_wrapper(lambda **kw: "ctx", None, (), {"address": "auto"}) == "ctx"
    assert "OTEL_EXPORTER_OTLP_TRACES_HEADERS is set: RL-Insight's monitor hub" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x"},  # the logger is off
        {rl_insight.ENABLE_ENV: "0", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20x"},
        {rl_insight.ENABLE_ENV: "1", "OTEL_EXPORTER_OTLP_HEADERS": " "},  # no headers
        {rl_insight.ENABLE_ENV: "1", config.OTLP_HEADERS_FILE: "/run/secrets/otlp"},  # otel-verl's own file
    ],
)
def test_no_warning_without_both(fresh_warnings, caplog, env):
    with caplog.at_level("WARNING", logger="otel_verl"):
        rl_insight.warn_shared_headers(env)
    assert not caplog.records


def test_rl_insight_hub_exports_with_a_private_provider_and_the_shared_headers(monkeypatch):
    """What the hub actor does (``MonitorHubActor._trace_collector``), in this process: the global
    tracer provider is the same object after, and its request carries OTEL_EXPORTER_OTLP_HEADERS."""
    require_module("rl_insight", "pip install -e '.[test]' (rl-insight)")
    from rl_insight.utils.opentelemetry_utils import OpenTelemetryTraceCollector

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{SECRET}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")  # its batch processor exports at once
    before = trace.get_tracer_provider()
    with OtlpReceiver() as rx:
        hub = OpenTelemetryTraceCollector(namespace="rl_insight_monitor", endpoint=f"{rx.url}/v1/traces")
        now = time.time_ns()
        hub.record_span("update_actor", now - 1000, now, attributes={"state_name": "update_actor"})
        deadline = time.monotonic() + 30
        while not rx.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert trace.get_tracer_provider() is before
        (path, headers, body) = rx.requests[0]
    assert path == "/v1/traces"
    assert headers["authorization"] == f"Bearer {SECRET}"
    (resource_spans,) = body["resourceSpans"]
    assert {"key": "service.name", "value": {"stringValue": "rl_insight_monitor"}} in resource_spans["resource"][
        "attributes"
    ]
