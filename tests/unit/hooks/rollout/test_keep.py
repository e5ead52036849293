"""Which trajectory trees are exported, decided at the end (``otel_verl.hooks.rollout.keep`` and its
use in ``trajectory``), with verl's real ``AgentLoopWorker``, ``LLMServerClient`` and
``RewardLoopWorker``: the step's slowest always, then a uniform sample within
``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``, failed ones beyond it; every tree whole (LLM calls, tools, user
spans, the reward worker's spans handed back across the "Ray" reply); the histograms count all.

Durations come from a driven clock (``state.clock``): the slow request's server call waits, by
yielding to the event loop, until every other trajectory of its step has ended, then moves the
clock on. Nothing depends on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pickle
import random
from collections import Counter

import numpy as np
import pytest
from omegaconf import OmegaConf
from opentelemetry import trace
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.workers.rollout.replica import TokenOutput
from verl_cpu_harness.agent_loop import (
    EchoAgentLoop,
    FakeBalancer,
    _Remote,
    by_name,
    hist,
    llm_calls,
    make_batch,
    make_worker,
)

from otel_verl import semconv
from otel_verl.config import settings
from otel_verl.hooks.rollout import keep, reward_worker
from otel_verl.hooks.rollout import state as rs
from otel_verl.process.state import PROCESS

SLOW_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(rs, "clock", c)
    return c


@pytest.fixture
def budget(monkeypatch):
    def set_budget(spans: int, slowest: int = 1) -> None:
        monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", str(spans))
        monkeypatch.setenv("OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP", str(slowest))
        settings.cache_clear()

    yield set_budget
    monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", raising=False)
    monkeypatch.delenv("OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP", raising=False)
    settings.cache_clear()


def tail_worker(clock: Clock, slow: set[int], step: int = 3):
    """The real worker whose server answers requests of ``max_tokens`` in ``slow`` last: once every
    other trajectory of the step has ended, ``SLOW_S`` later on the clock; the others 1 ms apart."""
    worker = make_worker()

    async def generate(*, request_id, prompt_ids, sampling_params, **kw):
        n = sampling_params["max_tokens"]
        if n in slow:
            group = rs.STATE.groups[(step, False)]
            while group.in_flight > len(slow):  # cooperative: the other trajectories run meanwhile
                await asyncio.sleep(0)
            clock.now += SLOW_S
        else:
            clock.now += 0.001
        return TokenOutput(token_ids=[7] * n, stop_reason="completed", num_preempted=0, extra_fields={})

    worker.llm_client._load_balancer = FakeBalancer(type("S", (), {"generate": _Remote(generate)})())
    return worker


def trees_of(captured):
    """trajectory span id -> (trajectory span, its spans below it, all processes)."""
    spans = captured.finished()
    by_parent: dict[int, list] = {}
    for s in spans:
        if s.parent is not None:
            by_parent.setdefault(s.parent.span_id, []).append(s)
    out = {}
    for t in (s for s in spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY):
        below, todo = [], [t.context.span_id]
        while todo:
            for child in by_parent.get(todo.pop(), []):
                below.append(child)
                todo.append(child.context.span_id)
        out[t.context.span_id] = (t, below)
    return out


# ------------------------------------------------------------------------------ the rule itself
def test_round_keeps_the_slowest_k_ranked_then_a_sample_and_drops_the_rest_at_once():
    r = keep.Round(budget=4, slowest=2, rng=random.Random(7))
    decided = []
    for i, d in enumerate([5.0, 1.0, 9.0, 2.0, 3.0, 8.0, 0.5, 4.0]):
        now, dropped = r.offer(d, i)
        assert now is None  # nothing is kept before the group ends (budget >= 0)
        if dropped is not None:
            decided.append(dropped)
        assert r.held <= 4  # never more than the budget waits for the group's end
    slowest, sample, rate = r.finish()
    assert slowest == [(2, 1), (5, 2)]  # 9.0 s, then 8.0 s
    assert len(sample) == 2 and not set(sample) & {2, 5}
    assert rate == pytest.approx(2 / 6)  # 2 of the 6 that were not among the slowest
    assert sorted(decided + sample + [2, 5]) == list(range(8))  # each one decided once


def test_round_sample_is_uniform_over_the_rest():
    counts = Counter()
    rng = random.Random(1234)
    for _ in range(4000):
        r = keep.Round(budget=3, slowest=1, rng=rng)
        for i in range(10):
            r.offer(100.0 if i == 4 else float(i % 3), i)
        slowest, sample, _ = r.finish()
        assert slowest == [(4, 1)]
        counts.update(sample)
    # each of the 9 others is sampled with chance 2/9: 889 of 4000 expected (binomial sd ~26)
    assert set(counts) == set(range(10)) - {4}
    assert all(abs(n - 4000 * 2 / 9) < 6 * 26 for n in counts.values()), counts


def test_round_with_budget_below_k_and_keep_all():
    r = keep.Round(budget=1, slowest=8, rng=random.Random(0))
    for i, d in enumerate([1.0, 3.0, 2.0]):
        r.offer(d, i)
    assert r.finish() == ([(1, 1)], [], 0.0)  # none of the other two sampled
    every = keep.Round(budget=-1, slowest=1, rng=random.Random(0))
    assert every.offer(1.0, "a") == (None, None)  # the slowest so far waits for the end
    assert every.offer(2.0, "b") == ("a", None)  # pushed out of the slowest: kept at once
    assert every.finish() == ([("b", 1)], [], 1.0)


# ------------------------------------------------------------------------------ real worker
def test_only_the_budget_of_trees_is_exported_the_slowest_whole_and_marked(captured, clock, budget):
    budget(3, slowest=1)
    worker = tail_worker(clock, slow={4})  # sample 2 (2 + index tokens) is slow
    asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=8, n=1)))  # 8 trajectories
    trees = trees_of(captured)
    assert len(trees) == 3  # the budget
    because = Counter(t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] for t, _ in trees.values())
    assert because == {semconv.KEPT_SLOWEST: 1, semconv.KEPT_SAMPLE: 2}
    ((slowest, below),) = [
        (t, b) for t, b in trees.values() if t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_SLOWEST
    ]
    assert slowest.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] == 2
    assert slowest.attributes[semconv.ATTR_ROLLOUT_SLOWEST_RANK] == 1
    assert slowest.attributes[semconv.ATTR_ROLLOUT_SAMPLE_RATE] == 1.0
    (call,) = below  # its whole tree: the LLM call, with the request's attributes
    assert semconv.is_llm_call(call.name, call.attributes) and call.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
    assert call.attributes[semconv.ATTR_ROLLOUT_SERVER_ID] == "replica-0"
    assert slowest.start_time <= call.start_time <= call.end_time <= slowest.end_time
    for t, _ in trees.values():
        if t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_SAMPLE:
            assert t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_RATE] == pytest.approx(2 / 7)  # 2 of the other 7
    # every trajectory counted, kept or not
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 8 and duration.max == pytest.approx(SLOW_S, abs=0.1)
    (llm,) = hist(captured, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert llm.count == 8
    assert len(llm_calls(captured)) == 3  # only in kept trees
    # the step's long-tail event names the kept tree and says what was kept
    (tail,) = by_name(captured, semconv.SPAN_ROLLOUT_TAIL)
    (event,) = tail.events
    a = event.attributes
    assert a[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] == format(slowest.context.span_id, "016x")
    assert a[semconv.ATTR_ROLLOUT_SLOWEST_TRACE_ID] == format(slowest.context.trace_id, "032x")
    assert a[semconv.ATTR_ROLLOUT_TRAJECTORIES] == 8
    assert a[semconv.ATTR_ROLLOUT_KEPT_PREFIX + semconv.KEPT_SLOWEST] == 1
    assert a[semconv.ATTR_ROLLOUT_KEPT_PREFIX + semconv.KEPT_SAMPLE] == 2
    assert a[semconv.ATTR_ROLLOUT_KEPT_PREFIX + semconv.KEPT_ERROR] == 0
    assert a[semconv.ATTR_ROLLOUT_NOT_KEPT] == 5
    assert PROCESS.telemetry.trees.trees == 0 and PROCESS.telemetry.trees.held == 0  # nothing left behind


def test_failed_trajectories_are_always_kept_beyond_the_budget(captured, clock, budget):
    budget(1, slowest=1)
    worker = make_worker()

    async def run():
        traj = {"step": 6, "validate": False, "rollout_n": 0}
        calls = [
            worker._run_agent_loop(
                {"temperature": 1.0},
                trajectory={**traj, "sample_index": i},
                agent_name="otel_test_agent",
                session_id=0,
                index=i,
                fail=i in (1, 3),
            )
            for i in range(5)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)  # as v1's _run_prompt settles them

    results = asyncio.run(run())
    assert [isinstance(r, RuntimeError) for r in results] == [False, True, False, True, False]
    trees = trees_of(captured)
    kept = {t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]: t for t, _ in trees.values()}
    assert len(kept) == 3  # the budget's one, and both failed ones
    for i in (1, 3):
        t = kept[i]
        assert t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_ERROR
        assert t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR
        assert t.status.status_code == trace.StatusCode.ERROR
        assert [e.name for e in t.events] == ["exception"]
        assert "agent failed" in t.events[0].attributes["exception.message"]
        (call,) = trees[t.context.span_id][1]  # its LLM call came back before the agent loop failed
        assert semconv.is_llm_call(call.name, call.attributes)
    (event,) = by_name(captured, semconv.SPAN_ROLLOUT_TAIL)[0].events
    assert event.attributes[semconv.ATTR_ROLLOUT_KEPT_PREFIX + semconv.KEPT_ERROR] == 2
    assert event.attributes[semconv.ATTR_ROLLOUT_NOT_KEPT] == 2


@register("otel_user_span_agent")
class UserSpanAgentLoop(EchoAgentLoop):
    """A user's agent loop that starts a span of its own with the plain API, around its LLM call."""

    async def run(self, sampling_params, **kwargs):
        tracer = PROCESS.telemetry.tracer_provider.get_tracer("my.agent")
        with tracer.start_as_current_span("my.turn", attributes={"i": int(kwargs["index"])}):
            return await super().run(sampling_params, **kwargs)


def test_user_spans_inside_a_trajectory_follow_its_tree(captured, clock, budget):
    budget(1, slowest=1)
    worker = tail_worker(clock, slow={3})  # prompt 1 is slow
    agents = np.array(["otel_user_span_agent"] * 3, dtype=object)
    asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=3, n=1, agent_name=agents)))
    ((t, below),) = trees_of(captured).values()
    assert t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] == 1
    (user,) = [s for s in below if s.name == "my.turn"]
    assert user.parent.span_id == t.context.span_id and user.attributes["i"] == 1
    assert user.context.trace_id == t.context.trace_id
    (call,) = [s for s in below if semconv.is_llm_call(s.name, s.attributes)]
    assert call.parent.span_id == t.context.span_id
    assert [s.attributes["i"] for s in captured.finished() if s.name == "my.turn"] == [1]  # the others: dropped
    assert PROCESS.telemetry.trees.held == 0


def test_zero_budget_records_nothing_and_every_trajectory_is_counted(captured, budget):
    budget(0)
    asyncio.run(make_worker().generate_sequences(make_batch()))
    assert not [s for s in captured.finished() if s.name.startswith("verl.rollout.")]
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4
    assert PROCESS.telemetry.trees.trees == 0


def test_the_sampler_still_decides(captured, monkeypatch):
    """A trajectory the configured sampler would not record (``always_off``) has no tree at all."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    monkeypatch.setattr(PROCESS.telemetry.trees, "sampler", ALWAYS_OFF)
    asyncio.run(make_worker().generate_sequences(make_batch()))
    assert by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY) == []
    assert PROCESS.telemetry.trees.trees == 0


# ------------------------------------------------------------------------------ the reward worker's spans
@register("otel_scored_agent")
class ScoredAgentLoop(EchoAgentLoop):
    """Leaves the reward to the reward loop (``reward_score`` None), as verl's own agent loops do."""

    async def run(self, sampling_params, **kwargs):
        out = await super().run(sampling_params, **kwargs)
        return AgentLoopOutput(
            prompt_ids=out.prompt_ids,
            response_ids=out.response_ids,
            response_mask=out.response_mask,
            num_turns=out.num_turns,
            reward_score=None,
            metrics=AgentLoopMetrics(),
        )


class _Manager:
    """verl's naive reward manager's shape: the user's sync function in the loop's executor."""

    def __init__(self, user_fn):
        self.user_fn = user_fn

    async def run_single(self, data):
        loop = asyncio.get_running_loop()
        score = await loop.run_in_executor(None, self.user_fn)
        return {"reward_score": score, "reward_extra_info": {"acc": score}}


def reward_handle(user_fn, replies):
    """A reward worker behind a stand-in Ray handle: the data and the reply go through pickle, as Ray's do."""
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config = OmegaConf.create({"reward": {"custom_reward_function": {"path": "user.py"}}})
    worker.reward_manager = _Manager(user_fn)

    async def remote(data):
        reply = await worker.compute_score(pickle.loads(pickle.dumps(data)))
        replies.append(reply)
        return pickle.loads(pickle.dumps(reply))

    return type("H", (), {"compute_score": _Remote(remote)})()


def test_the_reward_workers_spans_come_back_and_follow_the_trajectorys_tree(captured, clock, budget):
    budget(1, slowest=1)

    def user_fn():  # the user's reward function, in the reward worker's executor thread
        with PROCESS.telemetry.tracer_provider.get_tracer("my.reward").start_as_current_span("my.score"):
            return 1.0

    replies = []
    worker = tail_worker(clock, slow={4})
    worker.reward_loop_worker_handles = [reward_handle(user_fn, replies)]
    worker.mm_processor_kwargs = None  # what verl's _compute_score reads (no multi-modal data here)
    agents = np.array(["otel_scored_agent"] * 3, dtype=object)
    try:
        outputs = asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=3, n=1, agent_name=agents)))
    finally:
        _unpatch_executor()
    # verl got its reward and its extra info, and never our key
    assert [o.reward_score for o in outputs] == [1.0, 1.0, 1.0]
    assert all(o.extra_fields["reward_extra_info"] == {"acc": 1.0} for o in outputs)
    assert all(reward_worker.HANDBACK_KEY in r["reward_extra_info"] for r in replies)  # it travelled back
    ((t, below),) = trees_of(captured).values()
    assert t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] == 2  # the slow one
    (scoring,) = [s for s in below if s.name == semconv.SPAN_REWARD_WORKER]
    (user,) = [s for s in below if s.name == "my.score"]
    assert scoring.parent.span_id == t.context.span_id and scoring.parent.is_remote
    assert user.parent.span_id == scoring.context.span_id
    assert scoring.attributes[semconv.ATTR_STEP] == 3
    assert user.instrumentation_scope.name == "my.reward"
    assert scoring.resource.attributes == PROCESS.telemetry.tracer_provider.resource.attributes
    # the other two trajectories' reward spans were handed back too, and dropped with their trees
    names = Counter(s.name for s in captured.finished())
    assert names[semconv.SPAN_REWARD_WORKER] == 1 and names["my.score"] == 1
    assert PROCESS.telemetry.trees.trees == 0 and PROCESS.telemetry.trees.held == 0


def test_a_reward_call_that_fails_exports_its_spans_from_the_reward_worker(captured):
    from otel_verl import propagation
    from otel_verl.hooks.rollout.span_records import Rec

    def user_fn():
        raise ValueError("bad reward")

    trajectory = Rec("t", 0xABC, 0x123, 0, 1, {})
    parent = trace.NonRecordingSpan(
        trace.SpanContext(trajectory.trace_id, trajectory.span_id, True, trace.TraceFlags(trace.TraceFlags.SAMPLED))
    )
    carried = propagation.carrier_value(trace.set_span_in_context(parent), defer=True)
    replies = []
    handle = reward_handle(user_fn, replies)
    data = _reward_data({"data_source": "tiny_add", propagation.CARRIER_KEY: carried})
    try:
        with pytest.raises(ValueError, match="bad reward"):
            asyncio.run(handle.compute_score.remote(data))
    finally:
        _unpatch_executor()
    (span,) = by_name(captured, semconv.SPAN_REWARD_WORKER)
    assert span.parent.span_id == 0x123 and span.status.status_code == trace.StatusCode.ERROR
    assert PROCESS.telemetry.trees.trees == 0


def _reward_data(sample_kwargs):
    import torch
    from verl.protocol import DataProto

    non_tensors = {k: np.array([v], dtype=object) for k, v in sample_kwargs.items()}
    return DataProto.from_dict(tensors={"responses": torch.zeros(1, 2)}, non_tensors=non_tensors)


def _unpatch_executor() -> None:
    submit = concurrent.futures.ThreadPoolExecutor.submit
    if hasattr(submit, "__wrapped__"):
        concurrent.futures.ThreadPoolExecutor.submit = submit.__wrapped__
    reward_worker._STATE.identified = False


def test_a_group_decided_in_rounds_keeps_each_rounds_slowest_within_one_budget(captured, clock, budget):
    """v1 hands a prompt's rollouts out when that prompt's turn comes: a step's trajectories in a
    worker can end in two rounds. The budget is shared; the later round still keeps its slowest."""
    budget(2, slowest=1)
    worker = make_worker()

    async def one_round(indexes):
        traj = {"step": 8, "validate": False, "rollout_n": 0}
        calls = [
            worker._run_agent_loop(
                {"temperature": 1.0},
                trajectory={**traj, "sample_index": i},
                agent_name="otel_test_agent",
                session_id=0,
                index=i,
            )
            for i in indexes
        ]
        await asyncio.gather(*calls)

    asyncio.run(one_round(range(3)))  # the group ends: 2 trees kept (its slowest and one sample)
    asyncio.run(one_round(range(3, 6)))  # more of the same step: the budget is spent, its slowest kept
    trees = trees_of(captured)
    because = Counter(t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] for t, _ in trees.values())
    assert because == {semconv.KEPT_SLOWEST: 2, semconv.KEPT_SAMPLE: 1}
    tails = by_name(captured, semconv.SPAN_ROLLOUT_TAIL)
    assert [t.events[0].attributes[semconv.ATTR_ROLLOUT_TRAJECTORIES] for t in tails] == [3, 3]
    for tail in tails:  # each round's event names a tree that was exported
        span_id = tail.events[0].attributes[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID]
        assert int(span_id, 16) in trees


def test_each_exemplar_is_its_own_trajectorys_exported_span(captured, clock, budget):
    """The latency and token histograms' exemplars name the trajectory the value is of, and only one
    whose tree was exported: never the enclosing batch span, never a dropped tree."""
    budget(3, slowest=1)
    worker = tail_worker(clock, slow={4})
    asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=8, n=1)))
    trees = trees_of(captured)
    kept = {(t.context.trace_id, t.context.span_id) for t, _ in trees.values()}
    assert len(kept) == 3
    (slowest,) = [
        t for t, _ in trees.values() if t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_SLOWEST
    ]
    tokens = {
        (t.context.trace_id, t.context.span_id): t.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]
        for t, _ in trees.values()
    }
    points = captured.metric_points()  # one collection: each takes the exemplars offered since the last
    (duration,) = points[semconv.M_ROLLOUT_TRAJECTORY_DURATION]
    assert duration.exemplars
    assert {(e.trace_id, e.span_id) for e in duration.exemplars} <= kept
    (slow,) = [e for e in duration.exemplars if e.value == pytest.approx(SLOW_S, abs=0.1)]
    assert (slow.trace_id, slow.span_id) == (slowest.context.trace_id, slowest.context.span_id)
    (response,) = points[semconv.M_ROLLOUT_RESPONSE_TOKENS]
    assert response.exemplars
    for e in response.exemplars:  # each the span of the trajectory with that many tokens
        assert tokens[(e.trace_id, e.span_id)] == e.value
    (llm,) = points[semconv.M_ROLLOUT_LLM_CALL_DURATION]  # an LLM call's: the trajectory that made it
    (slow_call,) = [e for e in llm.exemplars if e.value == pytest.approx(SLOW_S, abs=0.1)]
    assert (slow_call.trace_id, slow_call.span_id) == (slowest.context.trace_id, slowest.context.span_id)
    assert {(e.trace_id, e.span_id) for e in llm.exemplars} <= kept
