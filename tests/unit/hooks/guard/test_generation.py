"""Generation health for the guard: the training batch measured in the TaskRunner (v0's
``compute_advantage``), each degenerate kind's share under otel-verl's own keys, evaluated with
verl's values of the same step through verl's real ``Tracking.log``."""

from __future__ import annotations

import types

import pytest
import torch
from support.batches import right_padded

from otel_verl import config, semconv
from otel_verl.hooks.guard import generation
from otel_verl.hooks.guard.rules import load_rules
from otel_verl.hooks.rollout import health

WIDTH = 8  # rollout.response_length
EOS = 9
LOOP = [1, 2, 1, 2, 1, 2, 1, 2]  # seq-rep-4 0.6, and at the length limit
EMPTY = [EOS]
FINE = [3, 4, 5]
KEY = semconv.GUARD_DEGENERATE_KEYS


def _batch(rows: list[list[int]]):
    from verl import DataProto

    n = len(rows)
    responses, mask = right_padded(rows, WIDTH)
    prompts = torch.ones(n, 4, dtype=torch.long)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": torch.cat([prompts, mask], dim=1)}
    )


@pytest.fixture
def tracking():
    from verl.utils.tracking import Tracking

    return Tracking(project_name="p", experiment_name="e", default_backend=["console"])


@pytest.fixture
def trainer(v0_trainer, tmp_path):
    v0_trainer.config = types.SimpleNamespace(
        trainer=types.SimpleNamespace(default_local_dir=str(tmp_path)),
        actor_rollout_ref=types.SimpleNamespace(rollout=types.SimpleNamespace(response_length=WIDTH)),
    )
    v0_trainer.tokenizer = types.SimpleNamespace(eos_token_id=EOS, pad_token_id=0)
    v0_trainer.total_training_steps = 10
    return v0_trainer


def _step(tracking, trainer, step: int, rows: list[list[int]], **logged) -> None:
    """One v0 training step: its ``adv`` stage's ``compute_advantage``, then verl's log of its values."""
    trainer.global_steps = step
    data = _batch(rows)
    assert generation._compute_advantage_wrapper(lambda *a, **k: data, None, (), {}) is data
    tracking.log(data={"training/global_step": step, "actor/pg_loss": 0.1, **logged}, step=step)


def _fired(captured) -> list[dict]:
    return [dict(e.attributes) for s in captured.finished() if s.name == semconv.SPAN_GUARD for e in s.events]


def test_a_collapsing_batch_fires_the_built_in_rule_at_its_second_step_per_kind(captured, tracking, trainer, capsys):
    rows = [LOOP, FINE, EMPTY, FINE, LOOP, FINE, EMPTY, FINE]  # a quarter loops, a quarter empty
    _step(tracking, trainer, 1, rows)
    assert _fired(captured) == []  # above 0.2 for two steps in a row: not yet
    _step(tracking, trainer, 2, rows)
    fired = {e[semconv.ATTR_METRIC_KEY]: e for e in _fired(captured)}
    assert sorted(fired) == sorted([KEY[semconv.DEGENERATE_REPETITIVE], KEY[semconv.DEGENERATE_EMPTY]])
    for event in fired.values():
        assert event[semconv.ATTR_GUARD_RULE] == "degenerate_responses"
        assert event[semconv.ATTR_GUARD_VALUE] == 0.25
        assert event[semconv.ATTR_GUARD_ACTION] == "alert"
        assert event[semconv.ATTR_STEP] == 2
    out = capsys.readouterr().out
    assert f"rule degenerate_responses at step 2: {KEY[semconv.DEGENERATE_EMPTY]}=0.25 above 0.2" in out


def test_a_healthy_batch_and_the_length_limit_alone_fire_nothing(captured, tracking, trainer):
    full = [3, 4, 5, 6, 7, 8, 10, 11]  # at the limit, not repetitive: a long answer, not a collapse
    for step in (1, 2, 3):
        _step(tracking, trainer, step, [full, FINE] * 4)
    assert _fired(captured) == []


def test_values_of_another_step_are_not_evaluated_and_verls_own_keys_win(captured, tracking, trainer):
    from otel_verl.hooks.guard import actions

    actions.add_values(7, {KEY[semconv.DEGENERATE_EMPTY]: 1.0})  # a step that never logged
    empty = [EMPTY] * 4
    for step in (1, 2):
        trainer.global_steps = step
        tracking.log(data={"training/global_step": step, KEY[semconv.DEGENERATE_EMPTY]: 0.0}, step=step)
        actions.add_values(step + 1, generation.shares(empty, health.Limits(WIDTH, frozenset({EOS}))))
    assert _fired(captured) == []  # step 2 had step 3's values pending: not its own


def test_nothing_is_measured_when_no_rule_watches_the_keys(captured, tracking, trainer, monkeypatch):
    measured = []
    real = health.measure
    monkeypatch.setattr(health, "measure", lambda ids, limits: measured.append(ids) or real(ids, limits))
    monkeypatch.setenv(config.GUARD_ACTIONS_BY_RULE, "degenerate_responses=off")
    config.settings.cache_clear()
    for step in (1, 2):
        _step(tracking, trainer, step, [LOOP] * 8)
    assert measured == [] and _fired(captured) == []


def test_a_large_batch_is_measured_on_a_bounded_spread_sample(captured, tracking, trainer, monkeypatch):
    measured = []
    real = health.measure
    monkeypatch.setattr(health, "measure", lambda ids, limits: measured.append(ids.tolist()) or real(ids, limits))
    n = 4 * generation.SCAN
    rows = [FINE] * (n - n // 4) + [LOOP] * (n // 4)  # the batch's last quarter collapsed (its last prompts)
    for step in (1, 2):
        _step(tracking, trainer, step, rows)
    assert len(measured) == 2 * generation.SCAN
    fired = {e[semconv.ATTR_METRIC_KEY]: e[semconv.ATTR_GUARD_VALUE] for e in _fired(captured)}
    assert fired == {KEY[semconv.DEGENERATE_REPETITIVE]: 0.25}  # the first SCAN rows alone would say 0


@pytest.mark.parametrize("total", [0, 1, 255, 256, 257, 1000, 100_000])
def test_spread_is_at_most_scan_positions_in_order_over_the_whole_batch(total):
    got = generation.spread(total)
    assert len(got) == min(total, generation.SCAN) and got == sorted(set(got))
    if total:
        assert got[0] == 0 and got[-1] >= total - total // generation.SCAN - 1 and got[-1] < total


def test_the_built_in_rule_watches_the_repetitive_and_empty_keys_only():
    (rule,) = [r for r in load_rules() if r.name == "degenerate_responses"]
    assert set(rule.keys) == {KEY[semconv.DEGENERATE_REPETITIVE], KEY[semconv.DEGENERATE_EMPTY]}
    assert not rule.matches(KEY[semconv.DEGENERATE_LENGTH_LIMIT])
