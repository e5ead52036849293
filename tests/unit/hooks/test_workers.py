"""Driver -> worker context hand-off with verl's real worker classes and data types."""

from __future__ import annotations

import inspect
import time

import pytest
import torch
import wrapt

from otel_verl import propagation, semconv


@pytest.fixture
def in_worker_actor(monkeypatch):
    monkeypatch.setenv("WG_PREFIX", "test")  # what verl sets in each worker-group actor


def test_worker_classes_are_patched_only_in_worker_actors(captured):
    from verl.workers.engine_workers import ActorRolloutRefWorker

    # Ray pickles worker classes from the driver; wrapped methods there would break that.
    assert not isinstance(ActorRolloutRefWorker.__dict__["update_actor"], wrapt.FunctionWrapper)


def test_wrapped_worker_methods_keep_verl_registration_and_coroutine_nature(in_worker_actor, captured):
    from verl.single_controller.base.decorator import MAGIC_ATTR
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    for cls, name in (
        (ActorRolloutRefWorker, "update_weights"),
        (ActorRolloutRefWorker, "update_actor"),
        (TrainingWorker, "train_mini_batch"),
    ):
        method = getattr(cls, name)
        assert isinstance(cls.__dict__[name], wrapt.FunctionWrapper), name  # really wrapped
        assert getattr(method, MAGIC_ATTR) == getattr(method.__wrapped__, MAGIC_ATTR)
        assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(method.__wrapped__)
    assert inspect.iscoroutinefunction(ActorRolloutRefWorker.update_weights)


def test_carrier_round_trip_through_a_tensordict_leaves_no_key(captured, v0_trainer):
    from verl.utils import tensordict_utils as tu

    td = tu.get_tensordict({"input_ids": torch.zeros(4, 3)}, {"calculate_entropy": True})
    tracer = captured  # noqa: F841 - spans come from the instrumented runtime
    from otel_verl.process.state import PROCESS

    with PROCESS.telemetry.tracer.start_as_current_span("verl.old_log_prob") as stage:
        assert propagation.inject(td)
    chunks = tu.chunk_tensordict(td, 2)  # what verl's dispatch does per data-parallel rank
    for chunk in chunks:
        ctx = propagation.take(chunk)
        assert ctx is not None
        from opentelemetry import trace

        parent = trace.get_current_span(ctx).get_span_context()
        assert parent.span_id == stage.get_span_context().span_id
        assert propagation.CARRIER_KEY not in chunk.keys()
        assert tu.get(chunk, "calculate_entropy") is True
    assert propagation.take(td) is not None and propagation.CARRIER_KEY not in td.keys()


def test_worker_call_becomes_child_of_driver_stage(captured, v0_trainer):
    """The worker-side wrapper takes the carrier out before verl's method sees the data."""
    from verl.utils import tensordict_utils as tu

    from otel_verl.hooks.workers import _LazyWorkerWrapper
    from otel_verl.process.state import PROCESS

    seen = {}

    class Rank1:
        rank = 1

    def infer_batch(data):  # stands in for the engine call; the wrapper is the real one
        seen["keys"] = set(data.keys())
        return "ok"

    td = tu.get_tensordict({"input_ids": torch.zeros(2, 3)}, {})
    with PROCESS.telemetry.tracer.start_as_current_span("verl.values") as stage:
        propagation.inject(td)
    assert _LazyWorkerWrapper("infer_batch")(infer_batch, Rank1(), (td,), {}) == "ok"
    assert propagation.CARRIER_KEY not in seen["keys"]
    spans = {s.name: s for s in captured.finished()}
    worker = spans["verl.worker.infer_batch"]
    assert worker.parent.span_id == stage.get_span_context().span_id
    assert worker.attributes[semconv.RES_RANK] == 1


def test_worker_call_outside_a_trace_makes_no_orphan_span(captured):
    from otel_verl.hooks.workers import _LazyWorkerWrapper

    async def update_weights(global_steps=None):
        return global_steps

    import asyncio

    assert asyncio.run(_LazyWorkerWrapper("update_weights")(update_weights, object(), (), {"global_steps": 3})) == 3
    assert captured.finished() == []


def test_a_rank_exports_spans_when_each_driver_call_ends_and_metrics_at_most_once_a_second(captured, monkeypatch):
    """Ray may end a rank right after the driver's last call: its spans go at once. Its gauges
    (``process.*``, ``hw.gpu.*``) are collected at most once per ``gap_s`` however many calls a step
    holds, in the background; a nested call's span goes with its driver call's flush."""
    from verl.utils import tensordict_utils as tu

    from otel_verl.hooks import workers
    from otel_verl.hooks.workers import _LazyWorkerWrapper
    from otel_verl.process.idle_export import IdleExport
    from otel_verl.process.state import PROCESS

    asked: list[str] = []
    telemetry = PROCESS.telemetry
    monkeypatch.setattr(telemetry, "request_flush", lambda coalesce=False: asked.append(f"spans coalesce={coalesce}"))
    monkeypatch.setattr(telemetry, "mark_step", lambda: asked.append("metrics"))
    calls = IdleExport(gap_s=0.3, coalesce_spans=False)
    monkeypatch.setattr(workers, "_DRIVER_CALLS", calls)

    def train_mini_batch(data):
        return "inner"

    def update_actor(data):  # a driver call with a nested engine call, as verl's
        return _LazyWorkerWrapper("train_mini_batch")(train_mini_batch, object(), (data,), {})

    def driver_call() -> None:
        td = tu.get_tensordict({"input_ids": torch.zeros(2, 3)}, {})
        with PROCESS.telemetry.tracer.start_as_current_span("verl.update_actor"):
            propagation.inject(td)
        assert _LazyWorkerWrapper("update_actor")(update_actor, object(), (td,), {}) == "inner"

    driver_call()
    telemetry.drain(5)  # the first metric export runs at once
    assert asked == ["spans coalesce=False", "metrics"]
    started = time.monotonic()
    for _ in range(3):  # three more calls within the gap: spans each time, one metric export after it
        driver_call()
    assert asked[2:] == ["spans coalesce=False"] * 3
    telemetry.drain(5)
    assert asked[2:] == ["spans coalesce=False"] * 3 + ["metrics"]
    assert time.monotonic() - started >= 0.3 * 0.9
    assert calls.in_flight == 0
    names = sorted(s.name for s in captured.finished() if s.name.startswith(semconv.SPAN_WORKER_PREFIX))
    assert names == ["verl.worker.train_mini_batch"] * 4 + ["verl.worker.update_actor"] * 4
