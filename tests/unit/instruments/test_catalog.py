"""The one definition of the instruments: built as described, and documented."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from otel_verl.instruments import Instruments, catalog


@pytest.mark.parametrize("spec", catalog.ALL, ids=lambda s: s.name)
def test_every_instrument_is_documented(spec):
    """The reference page's row is written from the spec and its source (scripts/gen_docs.py; tests/docs checks the
    page is current), so what it must carry is here: where the value comes from, and attributes
    that are documented names."""
    from otel_verl import telemetry_catalog

    assert telemetry_catalog.SOURCES[spec].strip(), spec.name
    for name in spec.attributes:
        telemetry_catalog.attribute(name)  # KeyError: an attribute without an entry


def test_names_are_unique():
    names = [s.name for s in (*catalog.ALL, *catalog.ENGINE)]
    assert len(names) == len(set(names))


def test_instruments_are_built_as_specified():
    reader = InMemoryMetricReader()
    inst = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"))
    inst.training.stage_duration.record(0.3, {"verl.stage": "gen"})
    inst.rollout.response_tokens.record(100)
    inst.training.steps.add(1)
    inst.training.record_log({"actor/kl_loss": 0.5})
    got = {
        m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    for spec in (catalog.STAGE_DURATION, catalog.ROLLOUT_RESPONSE_TOKENS, catalog.TRAINING_STEPS):
        metric = got[spec.name]
        assert (metric.unit, metric.description) == (spec.unit, spec.description)
        point = metric.data.data_points[0]
        if spec.buckets is not None:
            assert isinstance(point, HistogramDataPoint)
            assert tuple(point.explicit_bounds) == tuple(float(b) for b in spec.buckets)
    assert got["verl.actor.kl_loss"].description == "verl logged key 'actor/kl_loss'"


def test_observable_and_sync_kinds_are_not_mixed_up():
    meter = MeterProvider().get_meter("t")
    with pytest.raises(ValueError):
        catalog.create(meter, catalog.GPU_MEMORY_USAGE)
    with pytest.raises(ValueError):
        catalog.create_observable(meter, catalog.KL, [])
    assert re.fullmatch(r"verl\.<key>", catalog.LOGGED_VALUE.name)


def test_verls_step_key_is_the_step_gauge_not_a_second_one():
    """verl logs ``training/global_step`` with every step: ``verl.training.step`` carries it, so no
    ``verl.training.global_step`` beside it."""
    reader = InMemoryMetricReader()
    inst = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"))
    inst.training.record_log({"training/global_step": 3, "actor/pg_loss": 0.5})
    inst.training.record_step_end(3)
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "verl.training.global_step" not in names
    assert {"verl.training.step", "verl.actor.pg_loss"} <= names
