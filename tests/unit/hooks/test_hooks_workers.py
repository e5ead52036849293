"""Driver -> worker context hand-off with verl's real worker classes and data types."""

from __future__ import annotations

import inspect

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
