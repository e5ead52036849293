"""The TaskRunner's side of a dispatch to the agent-loop workers (``otel_verl.hooks.rollout.handoff``):
a ``verl.rollout.dispatch`` span over the whole call, and the time before the workers start the
batch as a ``verl.wait`` child and as the step's ``waiting``; with verl's real ``AgentLoopManager``
(v0; its replies merged by verl's real ``DataProto.concat``) and ``AgentLoopManagerTQ`` (v1).
"""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest
from support.clock import FakeClock
from unit.hooks.rollout.test_handoff import dispatch_v1, make_td
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.protocol import DataProto
from verl_cpu_harness.agent_loop import _Remote, by_name, make_batch, make_worker

from otel_verl import semconv
from otel_verl.hooks import accounting
from otel_verl.hooks.accounting import ACCOUNT
from otel_verl.hooks.rollout import handoff
from otel_verl.process.state import PROCESS

COLD_S = 0.05


class ReplyingWorker(type(make_worker())):
    """The real worker, replying with a ``DataProto`` as verl's own ``_postprocess`` does."""

    def _postprocess(self, outputs, input_non_tensor_batch, validate):
        n = len(outputs)
        return DataProto(non_tensor_batch={"index": np.arange(n)}, meta_info={"metrics": [], "validate": validate})


def v0_manager(cold: list[float]):
    """verl's manager with one stand-in Ray handle per worker: the call reaches a real worker
    (pickled, as Ray sends it) after that worker's cold start."""

    def handle(delay: float):
        worker = make_worker()
        worker.__class__ = ReplyingWorker

        async def remote(chunk):
            await asyncio.sleep(delay)  # a cold or busy worker: the batch waits
            reply = await worker.generate_sequences(pickle.loads(pickle.dumps(chunk)))
            return pickle.loads(pickle.dumps(reply))

        return type("W", (), {"generate_sequences": _Remote(remote)})()

    manager = AgentLoopManager.__new__(AgentLoopManager)
    manager.agent_loop_workers = [handle(d) for d in cold]
    manager._performance_metrics = lambda metrics, output: {}  # verl's timing figures need padded outputs
    return manager


def test_v0_dispatch_span_covers_the_call_and_the_wait_for_the_first_worker_is_waiting(captured, v0_trainer):
    tracer = PROCESS.telemetry.tracer
    manager = v0_manager(cold=[COLD_S, 3 * COLD_S])
    ACCOUNT.step_started(1)
    ACCOUNT.stage_started(2, 1)  # the gen stage
    with tracer.start_as_current_span(semconv.SPAN_GEN) as gen:
        output = manager.generate_sequences(make_batch(step=3, prompts=2, n=2))
    ACCOUNT.stage_ended(2, "gen")
    seconds = ACCOUNT.step_ended(1)
    # verl's merged reply holds none of the workers' start times (and concat saw no conflict)
    assert not [k for k in output.meta_info if k.startswith(handoff.STARTED_KEY)]

    (dispatch,) = by_name(captured, semconv.SPAN_ROLLOUT_DISPATCH)
    assert dispatch.parent.span_id == gen.get_span_context().span_id
    assert dispatch.attributes[semconv.ATTR_ROLLOUT_WORKERS] == 2
    assert dispatch.attributes[semconv.ATTR_ROLLOUT_BATCH_SIZE] == 4
    batches = by_name(captured, semconv.SPAN_ROLLOUT_BATCH)
    assert len(batches) == 2 and {b.parent.span_id for b in batches} == {dispatch.context.span_id}
    queued = dispatch.attributes[semconv.ATTR_ROLLOUT_QUEUED]
    queued_max = dispatch.attributes[semconv.ATTR_ROLLOUT_QUEUED_MAX]
    first_start = min(b.start_time for b in batches)
    assert queued == pytest.approx((first_start - dispatch.start_time) / 1e9, abs=1e-6)
    assert COLD_S <= queued <= queued_max  # the sleeps make the workers start at least that late
    assert queued_max >= 3 * COLD_S
    (wait,) = by_name(captured, semconv.SPAN_WAIT)
    assert wait.parent.span_id == dispatch.context.span_id
    assert wait.attributes[semconv.ATTR_WAIT_FOR] == semconv.WAIT_AGENT_LOOP_WORKERS
    assert wait.start_time == dispatch.start_time
    assert (wait.end_time - wait.start_time) / 1e9 == pytest.approx(queued, abs=1e-6)
    assert seconds[accounting.WAITING] == pytest.approx(queued)  # the step's waiting, out of rollout


def test_v0_dispatch_outside_a_traced_step_changes_nothing(captured, v0_trainer):
    output = v0_manager(cold=[0.0]).generate_sequences(make_batch(step=3, prompts=1, n=1))
    assert by_name(captured, semconv.SPAN_ROLLOUT_DISPATCH) == []
    assert not [k for k in output.meta_info if k.startswith(handoff.STARTED_KEY)]  # no carrier: no report


def test_concat_outside_a_dispatch_leaves_replies_alone(captured):
    key = handoff.STARTED_KEY + "1"
    replies = [DataProto(meta_info={key: 5}), DataProto(meta_info={key: 5})]
    assert DataProto.concat(replies).meta_info == {key: 5}  # verl's own merge, untouched


def test_v1_dispatch_is_the_wait_for_the_workers_to_take_the_batch(captured, v0_trainer, monkeypatch):
    clock = FakeClock(100.0)
    monkeypatch.setattr(accounting, "clock", clock)
    tracer = PROCESS.telemetry.tracer
    real_dispatch = handoff._inject_v1

    def slow_inject(*args, **kwargs):  # the workers take 2 s to accept (measured on the account's clock)
        d = real_dispatch(*args, **kwargs)
        clock.now += 2.0
        return d

    monkeypatch.setattr(handoff, "_inject_v1", slow_inject)
    with tracer.start_as_current_span(semconv.SPAN_STEP) as step:
        ACCOUNT.step_started(step.get_span_context().span_id)
        dispatch_v1(make_td(step=3), monkeypatch)  # prepare_step: before any stage
        clock.now += 1.0
        seconds = ACCOUNT.step_ended(step.get_span_context().span_id)
    (dispatch,) = by_name(captured, semconv.SPAN_ROLLOUT_DISPATCH)
    assert dispatch.parent.span_id == step.get_span_context().span_id
    (wait,) = by_name(captured, semconv.SPAN_WAIT)
    assert wait.parent.span_id == dispatch.context.span_id
    assert wait.attributes[semconv.ATTR_WAIT_SOURCE] == handoff.SOURCE_V1
    assert seconds[accounting.WAITING] == 2.0 and seconds[accounting.OTHER] == 1.0


def test_a_wait_inside_another_counts_once(monkeypatch):
    clock = FakeClock(100.0)
    monkeypatch.setattr(accounting, "clock", clock)
    account = accounting.StepAccount()
    account.step_started(1)
    account.stage_started(2, 1)
    outer = account.wait_started()
    inner = account.wait_started()  # a v1 refill dispatched from inside the replay buffer's wait
    assert outer and not inner
    account.wait_ended(0.5, inner)
    account.wait_ended(0.25)  # measured after the fact, inside the open wait: already counted
    account.wait_ended(0.75, outer)
    clock.now += 1.0
    account.stage_ended(2, "gen")
    seconds = account.step_ended(1)
    assert seconds[accounting.WAITING] == 0.75 and seconds[accounting.ROLLOUT] == 0.25
