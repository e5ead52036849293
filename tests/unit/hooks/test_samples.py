"""Sampled generations (``OTEL_VERL_SAMPLES``): off by default, exact step and reward when on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.batches import right_padded

from otel_verl import config, semconv
from otel_verl.hooks import samples


class _Tokenizer:
    """Decodes token ids as letters: id 1 -> 'a', ...; 0 is padding (a special token)."""

    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(96 + int(i)) for i in ids if int(i) != 0)


def _batch(n=6):
    from verl import DataProto

    prompts = torch.tensor([[0, 1, 2, 3]] * n) + torch.arange(n).unsqueeze(1) * (torch.tensor([0, 1, 1, 1]))
    responses = torch.tensor([[4, 5, 6, 0]] * n)
    scores = torch.zeros(n, 4)
    scores[:, 2] = torch.arange(n, dtype=torch.float32) / 4  # reward on the last response token
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "token_level_scores": scores},
        non_tensors={"data_source": np.array([f"src{i}" for i in range(n)], dtype=object)},
    )


def _advantage(data):
    return samples._compute_advantage_wrapper(lambda *a, **k: data, None, (), {})


@pytest.fixture
def trainer(v0_trainer):
    v0_trainer.tokenizer = _Tokenizer()
    v0_trainer.global_steps = 20
    return v0_trainer


def test_off_by_default_nothing_is_decoded_or_emitted(logged, trainer):
    assert config.settings().samples is False

    class Exploding(_Tokenizer):
        def decode(self, *a, **k):
            raise AssertionError("decoded although samples are off")

    trainer.tokenizer = Exploding()
    _advantage(_batch())
    assert logged.records() == []


def test_on_emits_per_step_samples_with_verl_reward(logged, trainer, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_SAMPLES", "true")
    monkeypatch.setenv("OTEL_VERL_SAMPLES_EVERY_N_STEPS", "10")
    monkeypatch.setenv("OTEL_VERL_SAMPLES_PER_STEP", "3")
    monkeypatch.setenv("OTEL_VERL_SAMPLES_MAX_CHARS", "2")
    config.settings.cache_clear()
    data = _batch()
    _advantage(data)
    records = logged.records()
    assert len(records) == 3
    expected = data.batch["token_level_scores"].sum(-1).tolist()
    for i, rec in enumerate(records):
        assert rec.event_name == semconv.EVENT_ROLLOUT_SAMPLE
        assert rec.attributes[semconv.ATTR_STEP] == 20
        assert rec.attributes[semconv.ATTR_SAMPLE_REWARD] == expected[i]
        assert rec.attributes[semconv.ATTR_DATA_SOURCE] == f"src{i}"
        assert rec.body == {"prompt": _Tokenizer().decode(data.batch["prompts"][i])[:2], "response": "de"}
    trainer.global_steps = 21  # not a multiple of 10
    _advantage(data)
    assert len(logged.records()) == 3


def test_samples_inside_a_stage_join_the_step_trace(logged, trainer, monkeypatch):
    from verl.utils.profiler import marked_timer

    monkeypatch.setenv("OTEL_VERL_SAMPLES", "1")
    config.settings.cache_clear()
    with marked_timer("step", {}):
        with marked_timer("adv", {}):
            _advantage(_batch())
    adv = next(s for s in logged.spans.get_finished_spans() if s.name == "verl.adv")
    assert len(logged.records()) == 4  # the default per step
    assert {r.trace_id for r in logged.records()} == {adv.context.trace_id}


def test_a_broken_batch_never_breaks_training(logged, trainer, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_SAMPLES", "true")
    config.settings.cache_clear()
    sentinel = object()
    assert samples._compute_advantage_wrapper(lambda: sentinel, None, (), {}) is sentinel
    assert logged.records() == []


# -- degenerate responses first --------------------------------------------------------------------

WIDTH = 8  # rollout.response_length: responses are right-padded to it
LOOP = [7] * 7  # one 4-gram, four times: seq-rep-4 0.75; shorter than the limit


def _degenerate_batch():
    """Six responses: 0 fine, 1 cut at the length limit, 2 fine, 3 a loop (shorter than the limit),
    4 empty (only the eos id 9), 5 fine. Reward i/4 on row i, so a record's reward names its row."""
    from omegaconf import OmegaConf
    from verl import DataProto

    rows = [[4, 5, 6], [1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 7], LOOP, [9], [6, 7, 8]]
    n = len(rows)
    responses, mask = right_padded(rows, WIDTH)
    prompts = torch.tensor([[0, 1, 2, 3]] * n) + torch.arange(n).unsqueeze(1) * torch.tensor([0, 1, 1, 1])
    scores = torch.zeros(n, WIDTH)
    scores[:, 0] = torch.arange(n, dtype=torch.float32) / 4
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.cat([torch.ones(n, 4, dtype=torch.long), mask], dim=1),
            "token_level_scores": scores,
        },
        non_tensors={"data_source": np.array([f"src{i}" for i in range(n)], dtype=object)},
    )
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": WIDTH}}})
    return data, config


class _EosTokenizer(_Tokenizer):
    eos_token_id = 9


def test_degenerate_responses_are_sampled_first_each_kind_in_turn_and_say_why(logged, trainer, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_SAMPLES", "true")
    monkeypatch.setenv("OTEL_VERL_SAMPLES_PER_STEP", "5")
    config.settings.cache_clear()
    data, trainer.config = _degenerate_batch()
    trainer.tokenizer = _EosTokenizer()
    _advantage(data)
    got = [
        (
            r.attributes[semconv.ATTR_SAMPLE_INDEX],
            r.attributes[semconv.ATTR_SAMPLE_PICKED_BECAUSE],
            tuple(r.attributes.get(semconv.ATTR_ROLLOUT_DEGENERATE, ())),
            r.attributes[semconv.ATTR_SAMPLE_REWARD],
            r.attributes[semconv.ATTR_DATA_SOURCE],
            r.body["response"],
        )
        for r in logged.records()
    ]
    assert got == [
        (3, semconv.DEGENERATE_REPETITIVE, (semconv.DEGENERATE_REPETITIVE,), 0.75, "src3", "ggggggg"),
        (4, semconv.DEGENERATE_EMPTY, (semconv.DEGENERATE_EMPTY,), 1.0, "src4", "i"),
        (1, semconv.DEGENERATE_LENGTH_LIMIT, (semconv.DEGENERATE_LENGTH_LIMIT,), 0.25, "src1", "abcdefgh"),
        (0, semconv.PICKED_FIRST, (), 0.0, "src0", "def"),
        (2, semconv.PICKED_FIRST, (), 0.5, "src2", "efg"),
    ]


def test_without_a_degenerate_response_or_a_mask_the_first_are_sampled(logged, trainer, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_SAMPLES", "true")
    monkeypatch.setenv("OTEL_VERL_SAMPLES_PER_STEP", "2")
    config.settings.cache_clear()
    _advantage(_batch())  # no attention_mask: lengths unknown, nothing measured
    assert [
        (r.attributes[semconv.ATTR_SAMPLE_INDEX], r.attributes[semconv.ATTR_SAMPLE_PICKED_BECAUSE])
        for r in logged.records()
    ] == [
        (0, semconv.PICKED_FIRST),
        (1, semconv.PICKED_FIRST),
    ]
    assert all(semconv.ATTR_ROLLOUT_DEGENERATE not in r.attributes for r in logged.records())


def test_pick_takes_each_kind_in_turn_a_response_once_and_reads_a_bounded_prefix(monkeypatch):
    from otel_verl.hooks.rollout import health

    limits = health.Limits(4, frozenset({9}))
    loop_at_limit = [1, 1, 1, 1, 1, 1]  # repetitive and at the length limit: picked once
    rows = [[1, 2], loop_at_limit, [9], [2, 2, 2, 2, 2, 2], [5, 6, 7, 8], [], [3]]
    assert samples.pick(rows, limits, 5, len(rows)) == [
        (1, semconv.DEGENERATE_REPETITIVE, (semconv.DEGENERATE_LENGTH_LIMIT, semconv.DEGENERATE_REPETITIVE)),
        (2, semconv.DEGENERATE_EMPTY, (semconv.DEGENERATE_EMPTY,)),
        (3, semconv.DEGENERATE_LENGTH_LIMIT, (semconv.DEGENERATE_LENGTH_LIMIT, semconv.DEGENERATE_REPETITIVE)),
        (5, semconv.DEGENERATE_EMPTY, (semconv.DEGENERATE_EMPTY,)),  # no repetitive one left
        (4, semconv.DEGENERATE_LENGTH_LIMIT, (semconv.DEGENERATE_LENGTH_LIMIT,)),
    ]
    assert samples.pick(rows, None, 2, len(rows)) == [(0, semconv.PICKED_FIRST, ()), (1, semconv.PICKED_FIRST, ())]

    read = []

    def rows_read():
        for i in range(10**6):
            read.append(i)
            yield [9]  # all empty

    monkeypatch.setattr(samples, "SCAN_MAX", 50)
    picks = samples.pick(rows_read(), limits, 3, 10**6)
    assert [i for i, _, _ in picks] == [0, 1, 2] and len(read) == 50
