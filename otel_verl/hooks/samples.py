"""Sampled generations as log records (opt-in: ``OTEL_VERL_SAMPLES=true``).

Every ``OTEL_VERL_SAMPLES_EVERY_N_STEPS``-th training step, ``OTEL_VERL_SAMPLES_PER_STEP``
samples of the batch become ``verl.rollout.sample`` log records (event name) with body
``{prompt, response}`` (each cut to ``OTEL_VERL_SAMPLES_MAX_CHARS``) and attributes ``verl.step``,
``verl.sample.reward`` (the sequence score verl dumps with ``trainer.rollout_data_dir``:
``token_level_scores`` summed), ``verl.data_source``, ``verl.sample.index`` (its batch position),
``verl.sample.picked_because`` and ``verl.rollout.degenerate`` (its degenerate kinds, if any).

Which samples: degenerate responses first (``pick``), so that the log opened when reward goes
strange shows the collapse. The batch's first ``SCAN_MAX`` responses are measured with the agent
loop's own ``health.measure`` (repetitive, empty, cut at ``rollout.response_length``: the same
definition as ``verl.rollout.degenerate_ratio``, on the same token ids), the kinds taken in turn
(repetitive, empty, length limit) so that one kind does not hide another; the rest are the batch's
first, in order (``first``). The measure reads at most ``health.MAX_EXAMINED`` ids per response,
and runs only on a sampled step with samples on. They carry the step's trace id (v0: emitted inside the ``adv``
stage span; v1: after the ``step`` timer ended, so they join the step span that just ended).
Off by default because prompts and responses can be sensitive; when off, the hooks return at
once and nothing is decoded.

Hook points, both in the TaskRunner, where the batch and the tokenizer already are:

* v0 ``RayPPOTrainer``: ``verl.trainer.ppo.ray_trainer.compute_advantage(data, ...)``, called
  every step in the ``adv`` stage with the whole ``DataProto`` (``prompts``, ``responses``,
  ``attention_mask``, ``token_level_scores``, ``data_source``) in memory: measuring the scanned
  responses and decoding K samples is all it costs (without ``attention_mask`` the lengths are
  unknown and the first K are taken);
* v1 ``PPOTrainer``: ``PPOTrainer._compute_metrics(batch, ...)`` after it ran; the batch
  lives in TransferQueue, so the scanned responses are fetched with one ``kv_batch_get``
  (``responses`` only, as verl's own metrics fetch them), then K samples' fields with another.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import Any

from opentelemetry import trace

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.rollout import health
from otel_verl.hooks.trainer import driver, real_keys
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


SCAN_MAX = 1024  # responses measured per sampled step: bounds the cost on the training thread
PREFERRED = (semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY, semconv.DEGENERATE_LENGTH_LIMIT)

Pick = tuple[int, str, tuple[str, ...]]  # (batch position, why it was picked, its degenerate kinds)


def pick(rows: Iterable[Any], limits: health.Limits | None, k: int, total: int) -> list[Pick]:
    """The ``k`` samples of a batch of ``total``: degenerate responses first, then the first ones.

    ``rows`` are the responses' unpadded token ids in batch order (only the first ``SCAN_MAX`` are
    read); ``limits`` None means they cannot be measured. Degenerate ones are taken one kind at a
    time in ``PREFERRED`` order, each in batch order.
    """
    kinds_of: dict[int, tuple[str, ...]] = {}
    queues: dict[str, deque[int]] = {kind: deque() for kind in PREFERRED}
    if limits is not None:
        for i, ids in enumerate(islice(rows, SCAN_MAX)):
            kinds = health.measure(ids, limits)[1]
            if kinds:
                kinds_of[i] = kinds
                for kind in kinds:
                    queues[kind].append(i)
    picked: dict[int, str] = {}  # insertion-ordered: the degenerate ones first
    while len(picked) < k and any(queues.values()):
        for kind in PREFERRED:
            queue = queues[kind]
            while queue and queue[0] in picked:  # a response of several kinds is picked once
                queue.popleft()
            if queue and len(picked) < k:
                picked[queue.popleft()] = kind
    for i in range(total):
        if len(picked) >= k:
            break
        picked.setdefault(i, semconv.PICKED_FIRST)
    return [(i, why, kinds_of.get(i, ())) for i, why in picked.items()]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def emit_samples(
    step: int,
    picks: list[Pick],
    prompts: list[str],
    responses: list[str],
    rewards: list[float],
    sources: list[Any],
) -> int:
    """Emit one log record per sample (``picks`` in the order of the other lists); returns how many were emitted."""
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
    for (i, why, kinds), prompt, response, reward, source in zip(
        picks, prompts, responses, rewards, sources, strict=False
    ):
        attrs: dict[str, Any] = {
            semconv.ATTR_STEP: step,
            semconv.ATTR_SAMPLE_REWARD: float(reward),
            semconv.ATTR_SAMPLE_INDEX: i,
            semconv.ATTR_SAMPLE_PICKED_BECAUSE: why,
        }
        if kinds:
            attrs[semconv.ATTR_ROLLOUT_DEGENERATE] = list(kinds)
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
    all_responses = batch["responses"]
    rows: Iterable[Any] = ()
    limits = None
    if "attention_mask" in batch.keys():  # its response part says each response's length (right-padded)
        width = all_responses.shape[-1]
        lengths = batch["attention_mask"][:SCAN_MAX, -width:].sum(-1).tolist()
        rows = (all_responses[i, :n] for i, n in enumerate(lengths))
        limits = health.Limits.of_trainer(trainer)
    picks = pick(rows, limits, k, len(all_responses))
    index = [i for i, _, _ in picks]
    prompts = _decode(tokenizer, batch["prompts"][index])
    responses = _decode(tokenizer, all_responses[index])
    rewards = batch["token_level_scores"][index].sum(-1).tolist()
    source = data.non_tensor_batch.get("data_source", None)
    sources = [source[i] for i in index] if source is not None else [None] * len(index)
    emit_samples(step, picks, prompts, responses, rewards, sources)


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
    real = real_keys(batch)
    scanned = trainer_base.tq.kv_batch_get(
        keys=real[:SCAN_MAX], partition_id=batch.partition_id, select_fields=["responses"]
    )
    picks = pick(scanned["responses"].unbind(), health.Limits.of_trainer(trainer), k, len(real))
    keys = [real[i] for i, _, _ in picks]
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
    emit_samples(step, picks, prompts, responses, rewards, sources)


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
