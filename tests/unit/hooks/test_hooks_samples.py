"""Sampled generations (``OTEL_VERL_SAMPLES``): off by default, exact step and reward when on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
