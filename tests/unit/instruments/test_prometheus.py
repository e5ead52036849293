"""Prometheus 3's OTLP name translation (``otel_verl.instruments.prometheus``), the rule the
``collector/`` kit's names are derived from."""

from __future__ import annotations

import pytest

from otel_verl.instruments import catalog
from otel_verl.instruments.prometheus import prometheus_name, series_names
from otel_verl.instruments.prometheus import translate as otlp_to_prometheus_name
from otel_verl.semconv import metric_name as verl_key_to_otel_name


@pytest.mark.parametrize(
    "name,unit,kind,expected",
    [
        # The examples given for otel-verl, and the rules they exercise in
        # prometheus/otlptranslator (metric_namer.go, unit_namer.go).
        ("verl.training.last_step.timestamp", "s", "gauge", "verl_training_last_step_timestamp_seconds"),
        ("verl.stage.duration", "s", "histogram", "verl_stage_duration_seconds"),
        ("verl.training.kl", "", "gauge", "verl_training_kl"),
        ("verl.training.steps", "{step}", "counter", "verl_training_steps_total"),
        ("verl.training.throughput", "{token}/s", "gauge", "verl_training_throughput_per_second"),
        ("hw.gpu.memory.usage", "By", "gauge", "hw_gpu_memory_usage_bytes"),
        ("hw.gpu.utilization", "1", "gauge", "hw_gpu_utilization_ratio"),
        ("verl.rollout.response.tokens", "{token}", "histogram", "verl_rollout_response_tokens"),
        # unit already part of the name, "total" moved to the end, "1" on a counter
        ("x.duration.seconds", "s", "gauge", "x_duration_seconds"),
        ("x.total.bytes", "By", "counter", "x_bytes_total"),
        ("x.count", "1", "counter", "x_count_total"),
        ("x.rate", "By/s", "gauge", "x_rate_bytes_per_second"),
    ],
)
def test_translation(name, unit, kind, expected):
    assert otlp_to_prometheus_name(name, unit, kind) == expected


def test_generic_key_mapping():
    assert verl_key_to_otel_name("actor/entropy") == "verl.actor.entropy"
    assert verl_key_to_otel_name("perf/mfu/actor") == "verl.perf.mfu.actor"
    assert verl_key_to_otel_name("timing_s/gen") == "verl.timing_s.gen"
    assert otlp_to_prometheus_name(verl_key_to_otel_name("critic/score/mean"), "", "gauge") == "verl_critic_score_mean"
    assert (
        otlp_to_prometheus_name(verl_key_to_otel_name("timing_per_token_ms/gen"), "", "gauge")
        == "verl_timing_per_token_ms_gen"
    )


def test_catalog_names_in_prometheus():
    assert prometheus_name(catalog.ROLLOUT_TAIL_RATIO) == "verl_rollout_tail_ratio"
    assert prometheus_name(catalog.GPU_MEMORY_USAGE) == "hw_gpu_memory_usage_bytes"
    assert series_names(catalog.STAGE_DURATION) == {
        "verl_stage_duration_seconds_bucket",
        "verl_stage_duration_seconds_sum",
        "verl_stage_duration_seconds_count",
    }
    assert series_names(catalog.NONFINITE) == {"verl_training_nonfinite_total"}
