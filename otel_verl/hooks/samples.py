"""Sampled generations as log records (opt-in: ``OTEL_VERL_SAMPLES=true``).

Every ``OTEL_VERL_SAMPLES_EVERY_N_STEPS``-th training step, the first
``OTEL_VERL_SAMPLES_PER_STEP`` samples of the batch become ``verl.rollout.sample`` log records
(event name) with body ``{prompt, response}`` (each cut to ``OTEL_VERL_SAMPLES_MAX_CHARS``)
and attributes ``verl.step``, ``verl.sample.reward`` (the sequence score verl dumps with
``trainer.rollout_data_dir``: ``token_level_scores`` summed), ``verl.data_source`` and
``verl.sample.index``. They carry the step's trace id (v0: emitted inside the ``adv``
stage span; v1: after the ``step`` timer ended, so they join the step span that just ended).
Off by default because prompts and responses can be sensitive; when off, the hooks return at
once and nothing is decoded.

Hook points, both in the TaskRunner, where the batch and the tokenizer already are:

* v0 ``RayPPOTrainer``: ``verl.trainer.ppo.ray_trainer.compute_advantage(data, ...)``, called
  every step in the ``adv`` stage with the whole ``DataProto`` (``prompts``, ``responses``,
  ``token_level_scores``, ``data_source``) in memory: decoding K samples is all it costs;
* v1 ``PPOTrainer``: ``PPOTrainer._compute_metrics(batch, ...)`` after it ran; the batch
  lives in TransferQueue, so K samples' fields are fetched with one ``kv_batch_get``.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.trainer import driver
from otel_verl.process.state import PROCESS


def _due(trainer: Any) -> int | None:
    """The step number if this step is sampled, else None."""
    cfg = settings()
    if not cfg.samples or trainer is None:
        return None
    step = getattr(trainer, "global_steps", None)
    if not isinstance(step, int) or step % cfg.samples_every_n_steps != 0:
        return None
    return step


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def emit_samples(step: int, prompts: list[str], responses: list[str], rewards: list[float], sources: list[Any]) -> int:
    """Emit one log record per sample; returns how many were emitted."""
    provider = PROCESS.logger_provider()
    if provider is None:
        return 0
    logger = provider.get_logger(semconv.SCOPE)
    context = None
    if not trace.get_current_span().get_span_context().is_valid and PROCESS.last_step is not None:
        # v1 computes its step metrics after the ``step`` timer: join the step that just ended.
        context = trace.set_span_in_context(trace.NonRecordingSpan(PROCESS.last_step[1]))
    limit = settings().samples_max_chars
    n = 0
    for i, (prompt, response, reward, source) in enumerate(zip(prompts, responses, rewards, sources, strict=False)):
        attrs: dict[str, Any] = {
            semconv.ATTR_STEP: step,
            semconv.ATTR_SAMPLE_REWARD: float(reward),
            semconv.ATTR_SAMPLE_INDEX: i,
        }
        if source is not None:
            attrs[semconv.ATTR_DATA_SOURCE] = str(source)
        body = {semconv.SAMPLE_BODY_PROMPT: _cut(prompt, limit), semconv.SAMPLE_BODY_RESPONSE: _cut(response, limit)}
        logger.emit(event_name=semconv.EVENT_ROLLOUT_SAMPLE, body=body, attributes=attrs, context=context)
        n += 1
    return n


def _decode(tokenizer: Any, rows: Any) -> list[str]:
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]


@safe("rollout samples (v0)")
def _samples_v0(data: Any) -> None:
    trainer = PROCESS.trainer
    if driver(trainer) != semconv.DRIVER_V0:
        return  # v1 reaches compute_advantage through its own path, with other fields
    step = _due(trainer)
    if step is None:
        return
    k = settings().samples_per_step
    batch = data.batch
    tokenizer = trainer.tokenizer
    prompts = _decode(tokenizer, batch["prompts"][:k])
    responses = _decode(tokenizer, batch["responses"][:k])
    rewards = batch["token_level_scores"][:k].sum(-1).tolist()
    sources = list(data.non_tensor_batch.get("data_source", [None] * len(prompts))[:k])
    emit_samples(step, prompts, responses, rewards, sources)


def _compute_advantage_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    if settings().samples:
        _samples_v0(result)
    return result


@safe("rollout samples (v1)")
def _samples_v1(trainer: Any, batch: Any) -> None:
    step = _due(trainer)
    if step is None:
        return
    from verl.trainer.ppo.v1 import trainer_base

    k = settings().samples_per_step
    keys = [key for key, tag in zip(batch.keys, batch.tags, strict=False) if not tag.get("is_padding", False)][:k]
    fields = ["prompts", "responses", "rm_scores"]
    try:
        data = trainer_base.tq.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=[*fields, "data_source"]
        )
    except Exception:  # noqa: BLE001 - a dataset without data_source
        data = trainer_base.tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
    pad = trainer.tokenizer.pad_token_id
    prompts = _decode(trainer.tokenizer, data["prompts"].to_padded_tensor(padding=pad))
    responses = _decode(trainer.tokenizer, data["responses"].to_padded_tensor(padding=pad))
    rewards = data["rm_scores"].to_padded_tensor(padding=0.0).sum(-1).tolist()
    source = data.get("data_source", None) if "data_source" in data.keys() else None
    sources = source.tolist() if source is not None else [None] * len(prompts)
    emit_samples(step, prompts, responses, rewards, sources)


def _compute_metrics_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    if settings().samples:
        batch = kwargs.get("batch", args[0] if args else None)
        _samples_v1(instance, batch)
    return result


HOOKS = [
    Hook(targets.TRAINER_V0, "compute_advantage", _compute_advantage_wrapper),
    Hook(targets.TRAINER_V1, "PPOTrainer._compute_metrics", _compute_metrics_wrapper),
]
