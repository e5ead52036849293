"""The training drivers: v1 ``PPOTrainer`` (verl 0.9 default) and legacy v0 ``RayPPOTrainer``.

* ``__init__``: remembers the trainer (step counter, epoch) and names the process
  (``verl.process.role=taskrunner``, ``verl.project``, ``verl.experiment``);
* ``init`` (v1) / ``init_workers`` (v0): a ``verl.init`` span for the run's start-up
  (worker groups, models, rollout servers), carrying the run's config as one attribute
  ``verl.config`` (``otel_verl.run_config``: JSON, secrets redacted, at most 32 KiB);
* ``_validate`` outside a timed stage (``val_before_train``): a ``verl.validation`` span, and the
  stall clock told that a validation runs (``otel_verl.stall.watchdog``);
* ``fit``: flushes spans and metrics when training ends, normally or with an error (e.g. a
  worker actor died: ``tests/e2e/faults/test_worker_death.py``), bounded by
  ``OTEL_VERL_SHUTDOWN_TIMEOUT``, so the last step and the failed call reach the backend before
  Ray tears the job down.
"""

from __future__ import annotations

import weakref
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_verl import per_process, semconv
from otel_verl._safe import safe
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.spans import SpanState, call_traced, close_span, open_span
from otel_verl.process import worker_metrics
from otel_verl.process.state import PROCESS
from otel_verl.run_config import config_json
from otel_verl.stall.watchdog import STEP_CLOCK, VALIDATION, WATCHDOG

V0 = targets.TRAINER_V0
V1 = targets.TRAINER_V1


def driver(trainer: Any) -> str:
    """``v1`` for verl's ``PPOTrainer`` (or a subclass), else ``v0`` (``RayPPOTrainer``)."""
    for klass in type(trainer).__mro__:
        if klass.__name__ == "PPOTrainer" and klass.__module__ == V1:
            return semconv.DRIVER_V1
    return semconv.DRIVER_V0


def real_keys(batch: Any) -> list[Any]:
    """A v1 batch's TransferQueue keys (``KVBatchMeta``) without the padding rows verl adds."""
    return [key for key, tag in zip(batch.keys, batch.tags, strict=False) if not tag.get("is_padding", False)]


def epoch_of(trainer: Any, global_step: int) -> int | None:
    """The epoch of ``global_step``, derived the way each driver counts it."""
    try:
        per_epoch = getattr(trainer, "steps_per_epoch", None)  # v1
        if per_epoch is None:
            per_epoch = len(trainer.train_dataloader)  # v0
        return max(global_step - 1, 0) // per_epoch if per_epoch else None
    except Exception:  # noqa: BLE001 - dataloader without len
        return None


# (the trainer, by weak reference: an id() could be reused by the next trainer; its step; attributes)
_attrs_cache: tuple[Any, Any, dict[str, Any]] = (None, None, {})


def _forget() -> None:
    global _attrs_cache
    _attrs_cache = (None, None, {})


per_process.register(__name__, reset=_forget)


def step_attributes(trainer: Any) -> dict[str, Any]:
    """``verl.driver``/``verl.step``/``verl.epoch`` for spans of the current step (a new dict)."""
    # A step opens ~10 stage spans: work these out once per step, not per span.
    global _attrs_cache
    step = getattr(trainer, "global_steps", None)
    cached_ref, cached_step, attrs = _attrs_cache
    if cached_ref is None or cached_ref() is not trainer or cached_step != step or not attrs:
        attrs = {semconv.ATTR_DRIVER: driver(trainer)}
        if isinstance(step, int):
            attrs[semconv.ATTR_STEP] = step
            epoch = epoch_of(trainer, step)
            if epoch is not None:
                attrs[semconv.ATTR_EPOCH] = epoch
        try:
            _attrs_cache = (weakref.ref(trainer), step, attrs)
        except TypeError:  # not weak-referenceable: no cache
            _attrs_cache = (None, None, {})
    return dict(attrs)


@safe("trainer identity")
def _remember(trainer: Any) -> None:
    global _attrs_cache
    PROCESS.trainer = trainer
    _attrs_cache = (None, None, {})
    cfg = getattr(getattr(trainer, "config", None), "trainer", None)
    get = getattr(cfg, "get", None)
    PROCESS.identify(
        role=semconv.ROLE_TASKRUNNER,
        project=str(get("project_name")) if get and get("project_name") else None,
        experiment=str(get("experiment_name")) if get and get("experiment_name") else None,
    )


def _trainer_init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _remember(instance)
    worker_metrics.ensure_worker_metrics()  # the TaskRunner's process.* gauges (exported at step boundaries)
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


@safe("verl.config attribute")
def _config_attribute(trainer: Any) -> dict[str, Any]:
    text = config_json(getattr(trainer, "config", None))
    return {semconv.ATTR_CONFIG: text} if text else {}


def _init_workers_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    extra = _config_attribute(instance)
    return _root_span_call(semconv.SPAN_INIT, wrapped, instance, args, kwargs, extra)


@safe("stall clock: validation")
def _validation_clock(started: bool) -> None:
    # a validation outside the loop's ``testing`` stage has the stall clock's validation norm too
    (STEP_CLOCK.stage_started if started else STEP_CLOCK.stage_ended)(VALIDATION)


def _validate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if trace.get_current_span().get_span_context().is_valid:
        return wrapped(*args, **kwargs)  # inside the ``testing`` stage span already
    initial = not getattr(instance, "global_steps", 0)
    extra = {semconv.ATTR_VALIDATION_INITIAL: initial}
    _validation_clock(True)
    try:
        return _root_span_call(semconv.SPAN_VALIDATION, wrapped, instance, args, kwargs, extra)
    finally:
        _validation_clock(False)


@safe("flush at end of fit")
def _flush() -> None:
    PROCESS.telemetry.flush()


@safe("stall watchdog start")
def _watch() -> None:
    STEP_CLOCK.fit_started()
    WATCHDOG.start()


def _fit_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    _remember(instance)
    _watch()
    try:
        return wrapped(*args, **kwargs)
    finally:
        WATCHDOG.stop()
        _flush()


HOOKS = [
    Hook(V0, "RayPPOTrainer.__init__", _trainer_init_wrapper),
    Hook(V0, "RayPPOTrainer.init_workers", _init_workers_wrapper),
    Hook(V0, "RayPPOTrainer._validate", _validate_wrapper),
    Hook(V0, "RayPPOTrainer.fit", _fit_wrapper),
    Hook(V1, "PPOTrainer.__init__", _trainer_init_wrapper),
    Hook(V1, "PPOTrainer.init", _init_workers_wrapper),
    Hook(V1, "PPOTrainer._validate", _validate_wrapper),
    Hook(V1, "PPOTrainer.fit", _fit_wrapper),
]
