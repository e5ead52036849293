"""Generation health (``otel_verl.hooks.rollout.health``): the detector on token ids, and the
per-step shares with verl's real ``AgentLoopWorker`` (its ``_run_agent_loop`` / ``_compute_score``)."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register
from verl_cpu_harness.agent_loop import CONFIG, EchoAgentLoop, by_name, make_batch, make_worker

from otel_verl import semconv
from otel_verl.hooks.rollout import health

EOS, PAD = 2, 0
MAX_LEN = 16
LIMITS = health.Limits(MAX_LEN, frozenset({EOS, PAD}))


def _varied(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 150000) for _ in range(n)]


def test_repetition_is_zero_for_varied_text_and_near_one_for_a_loop():
    assert health.repetition(_varied(200)) == 0.0
    assert health.repetition([5, 6, 7] * 60) > 0.95  # a 3-token loop
    assert health.repetition([9] * 100) > 0.95  # one token repeated
    # a loop that took over the end of a long response: only the end is read (the cap)
    assert health.repetition(_varied(5000) + [5, 6, 7, 8, 9] * 60) > 0.9
    assert health.repetition([1, 2, 3]) == 0.0 and health.repetition([]) == 0.0
    # a loop of up to half the window's tokens is repetitive; a longer period reads as varied text
    assert health.repetition(_varied(120) * 8) >= health.REPETITIVE_AT > health.repetition(_varied(140) * 8)


def test_repetition_reads_at_most_the_capped_window():
    class Counting(list):
        def __getitem__(self, key):
            out = super().__getitem__(key)
            self.read = len(out)
            return out

    ids = Counting(_varied(100_000))
    health.repetition(ids)
    assert ids.read == health.MAX_EXAMINED


@pytest.mark.parametrize(
    ("ids", "kinds"),
    [
        (_varied(10), ()),
        (_varied(MAX_LEN), (semconv.DEGENERATE_LENGTH_LIMIT,)),
        ([], (semconv.DEGENERATE_EMPTY,)),
        ([EOS], (semconv.DEGENERATE_EMPTY,)),
        ([EOS, PAD, PAD], (semconv.DEGENERATE_EMPTY,)),
        ([7, EOS], ()),
        ([3, 4] * 6, (semconv.DEGENERATE_REPETITIVE,)),
        ([3, 4] * 8, (semconv.DEGENERATE_LENGTH_LIMIT, semconv.DEGENERATE_REPETITIVE)),
        (np.array([3, 4] * 6), (semconv.DEGENERATE_REPETITIVE,)),  # not a list: its tolist()
    ],
)
def test_measure_names_each_kind(ids, kinds):
    assert health.measure(ids, LIMITS)[1] == kinds


def test_limits_unknown_measure_only_what_the_ids_say():
    unknown = health.Limits.of_worker(SimpleNamespace())
    assert unknown.max_length is None and unknown.stops == frozenset()
    assert health.measure(_varied(10_000), unknown)[1] == ()
    assert health.measure([], unknown)[1] == (semconv.DEGENERATE_EMPTY,)
    worker = SimpleNamespace(
        rollout_config=SimpleNamespace(response_length=MAX_LEN),
        tokenizer=SimpleNamespace(eos_token_id=[EOS, 5], pad_token_id=PAD),
    )
    limits = health.Limits.of_worker(worker)
    assert limits.max_length == MAX_LEN and limits.stops == frozenset({EOS, 5, PAD})


# what sample i of the batch answers (response ids)
RESPONSES = {
    0: _varied(8, 1),  # healthy
    1: _varied(MAX_LEN, 2),  # hit the length limit
    2: [EOS],  # empty
    3: [41, 42, 43] * 5,  # repetitive
}


@register("otel_health_agent")
class HealthAgentLoop(EchoAgentLoop):
    async def run(self, sampling_params, **kwargs):
        await self.server_manager.generate("req", prompt_ids=[1], sampling_params={**sampling_params, "max_tokens": 1})
        ids = RESPONSES[int(kwargs["index"])]
        return AgentLoopOutput(
            prompt_ids=[1], response_ids=ids, response_mask=[1] * len(ids), reward_score=0.0, metrics=AgentLoopMetrics()
        )


def _health_worker():
    worker = make_worker()
    config = OmegaConf.merge(CONFIG, {"actor_rollout_ref": {"rollout": {"response_length": MAX_LEN}}})
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.tokenizer = SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD)
    return worker


def test_a_steps_shares_of_degenerate_responses_are_gauges_and_on_the_trajectory_spans(captured):
    worker = _health_worker()
    batch = make_batch(prompts=4, n=2, agent_name=np.array(["otel_health_agent"] * 8, dtype=object))
    asyncio.run(worker.generate_sequences(batch))
    points = captured.metric_points()[semconv.M_ROLLOUT_DEGENERATE_RATIO]
    ratios = {p.attributes[semconv.ATTR_ROLLOUT_DEGENERATE_KIND]: p.value for p in points}
    assert ratios == {
        semconv.DEGENERATE_LENGTH_LIMIT: 0.25,
        semconv.DEGENERATE_EMPTY: 0.25,
        semconv.DEGENERATE_REPETITIVE: 0.25,
    }
    assert {p.attributes[semconv.ATTR_ROLLOUT_VALIDATE] for p in points} == {False}
    by_index = {}
    for span in by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY):
        by_index.setdefault(span.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX], []).append(span)
    assert all(semconv.ATTR_ROLLOUT_DEGENERATE not in s.attributes for s in by_index[0])
    for index, kind in ((1, semconv.DEGENERATE_LENGTH_LIMIT), (2, semconv.DEGENERATE_EMPTY)):
        assert {tuple(s.attributes[semconv.ATTR_ROLLOUT_DEGENERATE]) for s in by_index[index]} == {(kind,)}
    assert {s.attributes[semconv.ATTR_ROLLOUT_REPETITION] for s in by_index[3]} == {0.75}  # 3 of 12 4-grams distinct
    # the ids themselves never leave: no attribute holds a token list
    for spans in by_index.values():
        for s in spans:
            assert not any(isinstance(v, tuple) and v and isinstance(v[0], int) for v in s.attributes.values())


def test_the_next_step_starts_over_and_validation_has_its_own_shares(captured):
    worker = _health_worker()
    agent = {"agent_name": np.array(["otel_health_agent"] * 4, dtype=object)}
    asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=4, n=1, **agent)))
    asyncio.run(worker.generate_sequences(make_batch(step=4, prompts=2, n=1, **agent)))  # samples 0 and 1
    asyncio.run(worker.generate_sequences(make_batch(step=4, validate=True, prompts=4, n=1, **agent)))
    points = captured.metric_points()[semconv.M_ROLLOUT_DEGENERATE_RATIO]
    train = {
        p.attributes[semconv.ATTR_ROLLOUT_DEGENERATE_KIND]: p.value
        for p in points
        if not p.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    }
    assert train == {  # the last step's: one healthy, one at the length limit
        semconv.DEGENERATE_LENGTH_LIMIT: 0.5,
        semconv.DEGENERATE_EMPTY: 0.0,
        semconv.DEGENERATE_REPETITIVE: 0.0,
    }
    val = [p for p in points if p.attributes[semconv.ATTR_ROLLOUT_VALIDATE]]
    assert {p.value for p in val} == {0.25}
