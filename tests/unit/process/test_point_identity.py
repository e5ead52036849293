"""The step metric reader puts the series identity on every point it exports; the offline readers
leave it to the resource."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from otel_verl import semconv
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.process import point_identity
from otel_verl.process.step_reader import StepMetricReader

IDENTITY = {
    semconv.RES_RUN_ID: "run-1",
    semconv.RES_PROJECT: "proj",
    semconv.RES_EXPERIMENT: "exp",
    semconv.RES_ROLE: "worker",
    semconv.RES_RANK: 3,
    semconv.RES_HOST_NAME: "node-7",
}
OTHER = {semconv.RES_SERVICE_NAME: "verl", semconv.RES_PROCESS_PID: 42, "k8s.pod.name": "p"}


def _export(folder: Path, resource: dict) -> list[dict]:
    """Every kind of instrument through a StepMetricReader into a JSON file; its raw points."""
    folder.mkdir()
    path = folder / "metrics-worker3-42.jsonl"
    with path.open("w") as stream:
        reader = StepMetricReader(FileMetricExporter(stream=stream), export_interval_millis=3_600_000)
        provider = MeterProvider(resource=Resource.create(resource), metric_readers=[reader])
        meter = provider.get_meter("t")
        meter.create_counter("c").add(1, {"verl.stage": "gen"})
        meter.create_up_down_counter("u").add(2)
        meter.create_gauge("g").set(3.0)
        meter.create_histogram("h").record(0.5, {"verl.stage": "gen"})
        # a point with an identity attribute of its own (a user's verl.rank): it is kept
        meter.create_observable_gauge("o", callbacks=[lambda _: [Observation(1.0, {semconv.RES_RANK: 0})]])
        reader.mark_step()
        assert reader.force_flush(10_000)
        provider.shutdown()
    points = {}
    for line in path.read_text().splitlines():
        for rm in json.loads(line)["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    for kind in ("sum", "gauge", "histogram"):
                        for p in m.get(kind, {}).get("dataPoints", []):
                            points[m["name"]] = {
                                a["key"]: next(iter(a["value"].values())) for a in p.get("attributes", [])
                            }
    assert set(points) == {"c", "u", "g", "h", "o"}
    return points


def test_every_exported_point_carries_the_resource_identity(tmp_path):
    points = _export(tmp_path / "run", {**IDENTITY, **OTHER})
    identity = {k: str(v) for k, v in IDENTITY.items()}  # OTLP JSON writes an int64 as a string
    for name in ("c", "u", "g", "h"):
        assert {k: v for k, v in points[name].items() if k in IDENTITY} == identity, name
        assert not set(points[name]) & set(OTHER), name  # only the identity, not the whole resource
    assert points["c"]["verl.stage"] == "gen" and points["h"]["verl.stage"] == "gen"
    assert points["o"][semconv.RES_RANK] == "0"  # the point's own value wins


def test_a_resource_without_identity_leaves_the_points_alone(tmp_path):
    points = _export(tmp_path / "run", OTHER)
    assert points["g"] == {} and points["c"] == {"verl.stage": "gen"}


def test_the_offline_reader_leaves_the_copies_to_the_resource(tmp_path):
    _export(tmp_path / "run", {**IDENTITY, **OTHER})
    by_name = {p.name: p for p in read_metric_points(tmp_path / "run")}
    assert by_name["g"].attributes == {} and by_name["c"].attributes == {"verl.stage": "gen"}
    assert by_name["g"].resource[semconv.RES_RUN_ID] == "run-1"
    assert by_name["o"].attributes == {semconv.RES_RANK: 0}  # not the resource's value: the point's own


def test_a_batch_that_cannot_be_stamped_is_exported_as_it_is(tmp_path, monkeypatch):
    def broken(batch):
        raise TypeError("an SDK that shapes batches otherwise")

    monkeypatch.setattr(point_identity, "stamped", broken)
    points = _export(tmp_path / "run", {**IDENTITY, **OTHER})
    assert points["g"] == {} and points["c"] == {"verl.stage": "gen"}


@pytest.mark.parametrize("attrs", [IDENTITY, {semconv.RES_RUN_ID: "r"}, {}])
def test_identity_of(attrs):
    assert point_identity.identity_of({**attrs, **OTHER}) == attrs


def test_stamping_copies_and_leaves_the_collected_batch_as_it_was():
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create({**IDENTITY, **OTHER}), metric_readers=[reader])
    meter = provider.get_meter("t")
    meter.create_gauge("g").set(3.0)
    meter.create_histogram("h").record(0.5, {"verl.stage": "gen"})
    batch = reader.get_metrics_data()
    stamped = point_identity.stamped(batch)
    before = {m.name: m for m in batch.resource_metrics[0].scope_metrics[0].metrics}
    after = {m.name: m for m in stamped.resource_metrics[0].scope_metrics[0].metrics}
    assert before["g"].data.data_points[0].attributes == {} and len(before["h"].data.data_points[0].attributes) == 1
    for name, metric in after.items():
        (old,), (new,) = before[name].data.data_points, metric.data.data_points
        assert type(new) is type(old) and type(metric.data) is type(before[name].data)
        assert new.attributes == {**IDENTITY, **old.attributes}
        assert {k: v for k, v in vars(new).items() if k != "attributes"} == {
            k: v for k, v in vars(old).items() if k != "attributes"
        }
        assert (metric.name, metric.unit, metric.description) == (name, before[name].unit, before[name].description)
    provider.shutdown()


def test_a_point_type_with_slots_is_copied_through_its_constructor():
    from dataclasses import dataclass

    @dataclass(frozen=True, slots=True)
    class Point:
        attributes: dict
        value: float

    point = Point({"a": 1}, 2.0)
    assert point_identity._copy(point, "attributes", {"b": 2}) == Point({"b": 2}, 2.0)
    assert point.attributes == {"a": 1}
