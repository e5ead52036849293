"""``verl.replicas.*`` spans (``otel_verl.hooks.replicas``) on verl's real ``CheckpointEngineManager``
methods: each call is a span under the current stage, and ``auto_await`` still answers as it did
for each kind of caller (a sync trainer, a coroutine that awaits, a sync call inside a running loop).
"""

from __future__ import annotations

import asyncio

import pytest
import verl.checkpoint_engine.base as base
from opentelemetry import trace

from otel_verl import semconv


class _Replica:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def sleep(self) -> None:
        self.log.append("sleep")

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        await asyncio.sleep(0.01)
        self.log.append(f"abort reject={reject_request}")


def _manager(log: list[str]):
    manager = base.CheckpointEngineManager.__new__(base.CheckpointEngineManager)
    manager.replicas = [_Replica(log), _Replica(log)]
    return manager


def _spans(captured, op: str) -> list:
    return [s for s in captured.finished() if s.name == semconv.SPAN_REPLICAS_PREFIX + op]


def test_a_sync_trainer_call_is_a_child_of_the_current_stage(captured, v0_trainer):
    log: list[str] = []
    tracer = trace.get_tracer("test", tracer_provider=captured_provider(captured))
    with tracer.start_as_current_span("verl.gen") as stage:
        assert _manager(log).abort_replicas(reject_request=True) is None  # ran to the end here
        assert trace.get_current_span() is stage  # the caller's context as it was
    assert log == ["abort reject=True", "abort reject=True"]
    (span,) = _spans(captured, "abort")
    assert span.parent.span_id == stage.get_span_context().span_id
    assert span.attributes[semconv.ATTR_REPLICAS_COUNT] == 2
    assert span.end_time - span.start_time >= 10_000_000  # covers the replicas' 10 ms


def test_an_awaiting_coroutine_still_gets_a_coroutine(captured, v0_trainer):
    """verl's ``update_weights`` does ``await self.abort_replicas()``: auto_await must see a coroutine caller."""
    log: list[str] = []
    manager = _manager(log)

    async def verl_code() -> None:
        await manager.abort_replicas()
        await manager.sleep_replicas()

    asyncio.run(verl_code())
    (sleep,) = _spans(captured, "sleep")
    assert sleep.parent is None  # a sibling, not a child of the abort that ended before it
    assert log == ["abort reject=False"] * 2 + ["sleep"] * 2
    assert len(_spans(captured, "abort")) == 1 and len(_spans(captured, "sleep")) == 1


def test_a_sync_call_inside_a_running_loop_still_runs_it(captured, v0_trainer):
    log: list[str] = []
    manager = _manager(log)

    async def loop_owner() -> None:
        def sync_helper() -> None:  # auto_await's third case: a thread pool runs it
            manager.sleep_replicas()

        sync_helper()

    asyncio.run(loop_owner())
    assert log == ["sleep", "sleep"]
    assert len(_spans(captured, "sleep")) == 1


def test_verls_error_passes_through_and_is_recorded(captured, v0_trainer):
    class Broken(_Replica):
        async def sleep(self) -> None:
            raise RuntimeError("replica gone")

    manager = base.CheckpointEngineManager.__new__(base.CheckpointEngineManager)
    manager.replicas = [Broken([])]
    with pytest.raises(RuntimeError, match="replica gone"):
        manager.sleep_replicas()
    assert not trace.get_current_span().get_span_context().is_valid  # nothing left attached
    (span,) = _spans(captured, "sleep")
    assert span.status.status_code.name == "ERROR"


def test_outside_the_trainer_no_span(captured):
    log: list[str] = []
    _manager(log).sleep_replicas()
    assert log == ["sleep", "sleep"] and not _spans(captured, "sleep")


def captured_provider(captured):
    from otel_verl.process.state import PROCESS

    return PROCESS.telemetry.tracer_provider
