"""Generation health for the guard: the training batch's degenerate shares beside verl's values.

The agent-loop workers measure every trajectory (``hooks.rollout.health``) and export the shares as
``verl.rollout.degenerate_ratio``; the guard runs in the TaskRunner and sees only the dict verl
hands ``Tracking.log``. So on each training step the TaskRunner measures the training batch itself,
with the workers' own ``health.measure`` (one definition, the same config's limits), and hands the
guard each kind's share under otel-verl's own keys (``semconv.GUARD_DEGENERATE_KEYS``:
``otel_verl/degenerate_ratio/<kind>``), evaluated with verl's values of that step: the built-in
``degenerate_responses`` rule, and a user's rules on those keys. Nothing is exported but what a
firing rule reports.

At most ``SCAN`` responses are measured per step, spread evenly over the batch (every k-th: a
GRPO batch keeps a prompt's responses together, so the first ones would be a few prompts' only);
each reads at most ``health.MAX_EXAMINED`` token ids. Only while a rule the guard evaluates names
one of those keys (``actions.watches``); otherwise the hooks return at once.

Hook points, in the TaskRunner, where the batch is (as ``samples``):

* v0 ``compute_advantage(data, ...)``, in every training step's ``adv`` stage, the whole
  ``DataProto`` in memory (without ``attention_mask`` the lengths are unknown: nothing measured);
* v1 ``PPOTrainer._compute_metrics(batch, ...)``: the batch lives in TransferQueue, the measured
  responses are fetched with one ``kv_batch_get`` (``responses`` only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.guard import actions
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.rollout import health
from otel_verl.hooks.trainer import driver, real_keys
from otel_verl.process.state import PROCESS

SCAN = 256  # responses measured per step: a share's standard error is at most ~3 points


def spread(total: int, most: int = SCAN) -> list[int]:
    """At most ``most`` positions of a batch of ``total``, evenly spread over it, in order."""
    if total <= most:
        return list(range(total))
    return [i * total // most for i in range(most)]


def shares(rows: Iterable[Any], limits: health.Limits) -> dict[str, float] | None:
    """Each degenerate kind's share of ``rows`` (responses' unpadded token ids), under the guard's keys."""
    tally = health.Tally()
    for ids in rows:
        tally.add(health.measure(ids, limits)[1])
    ratios = tally.ratios()
    if ratios is None:
        return None
    return {semconv.GUARD_DEGENERATE_KEYS[kind]: share for kind, share in ratios.items()}


def _step(trainer: Any) -> int | None:
    """This training step's number, if the guard evaluates a rule on the generation keys; else None."""
    if trainer is None or settings().guard_action == "off":
        return None
    step = getattr(trainer, "global_steps", None)
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step if actions.watches(semconv.GUARD_DEGENERATE_KEYS.values()) else None


@safe("guard: generation health (v0)")
def _measure_v0(data: Any) -> None:
    trainer = PROCESS.trainer
    if driver(trainer) != semconv.DRIVER_V0:
        return  # v1 reaches compute_advantage through its own path, with other fields
    step = _step(trainer)
    if step is None:
        return
    batch = data.batch
    if "attention_mask" not in batch.keys():
        return
    found = padded_shares(batch["responses"], batch["attention_mask"], health.Limits.of_trainer(trainer))
    if found:
        actions.add_values(step, found)


def padded_shares(responses: Any, attention_mask: Any, limits: health.Limits) -> dict[str, float] | None:
    """``shares`` of a v0 batch: ``responses`` right-padded ``(batch, width)``, their lengths in the
    last ``width`` columns of ``attention_mask``; ``SCAN`` rows read at most."""
    index = spread(len(responses))
    lengths = attention_mask[index, -responses.shape[-1] :].sum(-1).tolist()
    return shares((responses[i, :n] for i, n in zip(index, lengths, strict=True)), limits)


def _compute_advantage_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _measure_v0(result)
    return result


@safe("guard: generation health (v1)")
def _measure_v1(trainer: Any, batch: Any) -> None:
    step = _step(trainer)
    if step is None or batch is None:
        return
    from verl.trainer.ppo.v1 import trainer_base

    real = real_keys(batch)
    if not real:
        return
    keys = [real[i] for i in spread(len(real))]
    fetched = trainer_base.tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["responses"])
    found = shares(fetched["responses"].unbind(), health.Limits.of_trainer(trainer))
    if found:
        actions.add_values(step, found)


def _compute_metrics_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _measure_v1(instance, kwargs.get("batch", args[0] if args else None))
    return result


HOOKS = [
    Hook(targets.TRAINER_V0, "compute_advantage", _compute_advantage_wrapper),
    Hook(targets.TRAINER_V1, "PPOTrainer._compute_metrics", _compute_metrics_wrapper),
]
