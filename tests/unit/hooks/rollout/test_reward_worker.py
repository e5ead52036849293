"""Reward scoring in the reward-loop worker (``otel_verl.hooks.rollout.reward_worker``): the
reward span's context travels in the per-sample kwargs, verl's real ``RewardLoopWorker.compute_score``
runs under ``verl.reward_worker.compute_score``, and a user span started by a synchronous reward
function (which verl runs in an executor thread) is its child, with the step available.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from opentelemetry import trace
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.protocol import DataProto

from otel_verl import current_step, propagation, semconv, step_attributes, step_context
from otel_verl.hooks.rollout import reward_worker


class _Manager:
    """verl's naive reward manager's shape: the user's sync function in the loop's executor."""

    def __init__(self, user_fn):
        self.user_fn = user_fn

    async def run_single(self, data):
        loop = asyncio.get_running_loop()
        return {"reward_score": await loop.run_in_executor(None, self.user_fn), "reward_extra_info": {}}


def _worker(user_fn) -> RewardLoopWorker:
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config = OmegaConf.create({"reward": {"custom_reward_function": {"path": "user.py"}}})
    worker.reward_manager = _Manager(user_fn)
    return worker


def _data(sample_kwargs: dict) -> DataProto:
    non_tensors = {k: np.array([v], dtype=object) for k, v in sample_kwargs.items()}
    return DataProto.from_dict(tensors={"responses": torch.zeros(1, 2)}, non_tensors=non_tensors)


def test_carry_puts_the_context_in_a_copy_of_the_sample_kwargs(captured):
    sample = {"data_source": "tiny_add", "uid": "u1"}
    with captured_span(captured, step=7) as span:
        args, kwargs = reward_worker.carry(([object()], sample), {})
    assert sample == {"data_source": "tiny_add", "uid": "u1"}  # verl's own dict untouched
    carried = args[1][propagation.CARRIER_KEY]
    ctx = propagation.extract(carried)
    assert trace.get_current_span(ctx).get_span_context().span_id == span.get_span_context().span_id
    assert current_step(ctx) == 7


def test_user_span_in_the_executor_is_a_child_of_the_worker_span(captured):
    seen: dict = {}

    def user_fn():
        with trace.get_tracer("my.reward", tracer_provider=captured_provider(captured)).start_as_current_span("my"):
            seen["attrs"] = step_attributes()
        return 1.0

    with captured_span(captured, step=3, epoch=1):
        carried = propagation.carrier_value()
    data = _data({"data_source": "tiny_add", propagation.CARRIER_KEY: carried})
    try:
        result = asyncio.run(_worker(user_fn).compute_score(data))
    finally:
        _unpatch_executor()
    assert result["reward_score"] == 1.0
    assert propagation.CARRIER_KEY not in data.non_tensor_batch  # taken out before verl's code ran
    spans = {s.name: s for s in captured.finished()}
    worker_span, user_span = spans[semconv.SPAN_REWARD_WORKER], spans["my"]
    assert worker_span.parent.span_id == spans["outer"].context.span_id
    assert worker_span.attributes[semconv.ATTR_STEP] == 3
    assert user_span.parent.span_id == worker_span.context.span_id
    assert seen["attrs"] == {semconv.ATTR_STEP: 3, semconv.ATTR_EPOCH: 1}


def test_a_verl_error_passes_through_and_is_recorded(captured):
    def user_fn():
        raise ValueError("bad reward")

    data = _data({"data_source": "tiny_add"})
    try:
        with pytest.raises(ValueError, match="bad reward"):
            asyncio.run(_worker(user_fn).compute_score(data))
    finally:
        _unpatch_executor()
    (span,) = [s for s in captured.finished() if s.name == semconv.SPAN_REWARD_WORKER]
    assert span.status.status_code.name == "ERROR"
    assert span.parent is None  # nothing carried in: a root, verl unaffected


def test_spans_are_flushed_as_soon_as_the_worker_is_idle(captured, monkeypatch):
    """Ray may end the reward actor ~0.5 s after the job's last score, without ``atexit``: the span
    flush is asked for when the last running call ends, not after the metric export's gap."""
    from otel_verl.process.state import PROCESS

    telemetry = PROCESS.telemetry
    asked: list[str] = []
    monkeypatch.setattr(telemetry, "request_flush", lambda **kw: asked.append("spans"))
    monkeypatch.setattr(telemetry, "submit", lambda work: asked.append("metrics later"))
    data = _data({"data_source": "tiny_add"})
    try:
        asyncio.run(_worker(lambda: 1.0).compute_score(data))
    finally:
        _unpatch_executor()
    assert asked == ["spans", "metrics later"]


# -- helpers -----------------------------------------------------------------------------------------
class captured_span:
    """An ``outer`` span with the step as baggage, current while the block runs."""

    def __init__(self, captured, step: int, epoch: int | None = None) -> None:
        self._tracer = captured_provider(captured).get_tracer("test")
        self._step, self._epoch = step, epoch

    def __enter__(self):
        from opentelemetry import context

        self._span = self._tracer.start_span("outer")
        ctx = step_context.with_step(self._step, self._epoch, trace.set_span_in_context(self._span))
        self._token = context.attach(ctx)
        return self._span

    def __exit__(self, *exc) -> None:
        from opentelemetry import context

        context.detach(self._token)
        self._span.end()


def captured_provider(captured):
    from otel_verl.process.state import PROCESS

    return PROCESS.telemetry.tracer_provider


def _unpatch_executor() -> None:
    submit = concurrent.futures.ThreadPoolExecutor.submit
    if hasattr(submit, "__wrapped__"):
        concurrent.futures.ThreadPoolExecutor.submit = submit.__wrapped__
    reward_worker._STATE.identified = False
