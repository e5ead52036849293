"""The training drivers: v1 ``PPOTrainer`` (verl 0.9 default) and legacy v0 ``RayPPOTrainer``.

* ``__init__``: remembers the trainer (step counter, epoch) and names the process
  (``verl.process.role=taskrunner``, ``verl.project``, ``verl.experiment``);
* ``init`` (v1) / ``init_workers`` (v0): a ``verl.init`` span for the run's start-up
  (worker groups, models, rollout servers), carrying the run's config as one attribute
  ``verl.config`` (JSON, secrets redacted by ``otel_verl.redact``, at most 32 KiB);
* ``_validate`` outside a timed stage (``val_before_train``): a ``verl.validation`` span;
* ``fit``: flushes spans and metrics when training ends, normally or with an error (e.g. a
  worker actor died: ``tests/faults/test_worker_death.py``), bounded by
  ``OTEL_VERL_SHUTDOWN_TIMEOUT``, so the last step and the failed call reach the backend before
  Ray tears the job down.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_verl import gpu, redact, semconv
from otel_verl._safe import safe
from otel_verl.hooks import Hook, SpanState, call_traced, close_span, open_span
from otel_verl.runtime import RUNTIME

V0 = "verl.trainer.ppo.ray_trainer"
V1 = "verl.trainer.ppo.v1.trainer_base"


def _driver(trainer: Any) -> str:
    return semconv.DRIVER_V1 if hasattr(trainer, "steps_per_epoch") else semconv.DRIVER_V0


def epoch_of(trainer: Any, global_step: int) -> int | None:
    """The epoch of ``global_step``, derived the way each driver counts it."""
    try:
        per_epoch = getattr(trainer, "steps_per_epoch", None)  # v1
        if per_epoch is None:
            per_epoch = len(trainer.train_dataloader)  # v0
        return max(global_step - 1, 0) // per_epoch if per_epoch else None
    except Exception:  # noqa: BLE001 - dataloader without len
        return None


_attrs_cache: tuple[int, Any, dict[str, Any]] = (0, None, {})


def step_attributes(trainer: Any) -> dict[str, Any]:
    """``verl.driver``/``verl.step``/``verl.epoch`` for spans of the current step (a new dict)."""
    # A step opens ~10 stage spans: work these out once per step, not per span.
    global _attrs_cache
    step = getattr(trainer, "global_steps", None)
    cached_id, cached_step, attrs = _attrs_cache
    if cached_id != id(trainer) or cached_step != step or not attrs:
        attrs = {semconv.ATTR_DRIVER: _driver(trainer)}
        if isinstance(step, int):
            attrs[semconv.ATTR_STEP] = step
            epoch = epoch_of(trainer, step)
            if epoch is not None:
                attrs[semconv.ATTR_EPOCH] = epoch
        _attrs_cache = (id(trainer), step, attrs)
    return dict(attrs)


@safe("trainer identity")
def _remember(trainer: Any) -> None:
    global _attrs_cache
    RUNTIME.trainer = trainer
    _attrs_cache = (0, None, {})
    cfg = getattr(getattr(trainer, "config", None), "trainer", None)
    get = getattr(cfg, "get", None)
    RUNTIME.identify(
        role=semconv.ROLE_TASKRUNNER,
        project=str(get("project_name")) if get and get("project_name") else None,
        experiment=str(get("experiment_name")) if get and get("experiment_name") else None,
    )


def _init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _remember(instance)
    gpu.ensure_worker_metrics()  # the TaskRunner's process.* gauges (exported at step boundaries)
    return result


@safe("span start")
def _open(name: str, trainer: Any, extra: dict[str, Any] | None = None) -> SpanState | None:
    attrs = step_attributes(trainer)
    attrs[semconv.ATTR_TRAINER_CLASS] = type(trainer).__name__
    attrs.update(extra or {})
    return open_span(name, context=otel_context.Context(), attributes=attrs)  # a trace of its own


_close = safe("span end")(close_span)


def _root_span_call(name: str, wrapped: Any, instance: Any, args: Any, kwargs: Any, extra: Any = None) -> Any:
    _remember(instance)
    return call_traced(_open(name, instance, extra), _close, wrapped, *args, **kwargs)


def _plain(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        DictConfig = None  # noqa: N806
    if DictConfig is not None and isinstance(cfg, DictConfig):
        try:
            return OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # noqa: BLE001 - an interpolation that does not resolve: keep it as written
            return OmegaConf.to_container(cfg, resolve=False)
    return cfg


def _leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, Mapping) and value:
        out: list[tuple[tuple[str, ...], Any]] = []
        for key, item in value.items():
            out += _leaves(item, (*path, str(key)))
        return out
    return [(path, value)]


def _nest(leaves: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path, value in leaves:
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return root


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


def config_json(cfg: Any, limit: int = semconv.CONFIG_MAX_BYTES) -> str | None:
    """verl's config as compact nested JSON with secrets redacted, at most ``limit`` bytes.

    Too big: empty values are left out, then the longest values until it fits;
    ``_otel_verl_dropped`` (top level) counts the entries left out.
    """
    data = _plain(cfg)
    if not isinstance(data, Mapping):
        return None
    data = redact.redact(data)
    text = _dumps(data)
    if len(text.encode()) <= limit:
        return text
    leaves = [(p, v) for p, v in _leaves(data) if p]
    kept = [(p, v) for p, v in leaves if not (v is None or (isinstance(v, (str, list, tuple, dict)) and not v))]
    sizes = [len(_dumps(v).encode()) + len(p[-1].encode()) + 4 for p, v in kept]
    order = sorted(range(len(kept)), key=sizes.__getitem__)  # shortest first
    while order:
        chosen = sorted(order)  # the config's own order
        nested = _nest([kept[i] for i in chosen])
        nested[semconv.CONFIG_TRUNCATED_KEY] = len(leaves) - len(chosen)
        text = _dumps(nested)
        excess = len(text.encode()) - limit
        if excess <= 0:
            return text
        while order and excess > 0:  # drop the longest values worth at least the excess
            excess -= sizes[order.pop()]
    return None


@safe("verl.config attribute")
def _config_attribute(trainer: Any) -> dict[str, Any]:
    text = config_json(getattr(trainer, "config", None))
    return {semconv.ATTR_CONFIG: text} if text else {}


def _init_workers_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    extra = _config_attribute(instance)
    return _root_span_call(semconv.SPAN_INIT, wrapped, instance, args, kwargs, extra)


def _validate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if trace.get_current_span().get_span_context().is_valid:
        return wrapped(*args, **kwargs)  # inside the ``testing`` stage span already
    initial = not getattr(instance, "global_steps", 0)
    extra = {semconv.ATTR_VALIDATION_INITIAL: initial}
    return _root_span_call(semconv.SPAN_VALIDATION, wrapped, instance, args, kwargs, extra)


@safe("flush at end of fit")
def _flush() -> None:
    RUNTIME.telemetry.flush()


def _fit_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    _remember(instance)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _flush()


HOOKS = [
    Hook(V0, "RayPPOTrainer.__init__", _init_wrapper),
    Hook(V0, "RayPPOTrainer.init_workers", _init_workers_wrapper),
    Hook(V0, "RayPPOTrainer._validate", _validate_wrapper),
    Hook(V0, "RayPPOTrainer.fit", _fit_wrapper),
    Hook(V1, "PPOTrainer.__init__", _init_wrapper),
    Hook(V1, "PPOTrainer.init", _init_workers_wrapper),
    Hook(V1, "PPOTrainer._validate", _validate_wrapper),
    Hook(V1, "PPOTrainer.fit", _fit_wrapper),
]
