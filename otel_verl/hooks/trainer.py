"""The training drivers: v1 ``PPOTrainer`` (verl 0.9 default) and legacy v0 ``RayPPOTrainer``.

* ``__init__``: remembers the trainer (step counter, epoch) and names the process
  (``verl.process.role=taskrunner``, ``verl.project``, ``verl.experiment``);
* ``init`` (v1) / ``init_workers`` (v0): a ``verl.init`` span for the run's start-up
  (worker groups, models, rollout servers);
* ``_validate`` outside a timed stage (``val_before_train``): a ``verl.validation`` span;
* ``fit``: flushes spans and metrics when training ends (bounded by
  ``OTEL_VERL_SHUTDOWN_TIMEOUT``) so the last step always reaches the backend.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.hooks import Hook, end_span
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


def step_attributes(trainer: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {semconv.ATTR_DRIVER: _driver(trainer)}
    step = getattr(trainer, "global_steps", None)
    if isinstance(step, int):
        attrs[semconv.ATTR_STEP] = step
        epoch = epoch_of(trainer, step)
        if epoch is not None:
            attrs[semconv.ATTR_EPOCH] = epoch
    return attrs


@safe("trainer identity")
def _remember(trainer: Any) -> None:
    RUNTIME.trainer = trainer
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
    return result


@safe("span start")
def _open(name: str, trainer: Any, extra: dict[str, Any] | None = None) -> tuple[Any, Any] | None:
    attrs = step_attributes(trainer)
    attrs[semconv.ATTR_TRAINER_CLASS] = type(trainer).__name__
    attrs.update(extra or {})
    span = RUNTIME.telemetry.tracer.start_span(name, context=otel_context.Context(), attributes=attrs)
    return span, otel_context.attach(trace.set_span_in_context(span))


@safe("span end")
def _close(state: tuple[Any, Any], error: BaseException | None) -> None:
    span, token = state
    otel_context.detach(token)
    end_span(span, error)


def _root_span_call(name: str, wrapped: Any, instance: Any, args: Any, kwargs: Any, extra: Any = None) -> Any:
    _remember(instance)
    state = _open(name, instance, extra)
    if state is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _close(state, exc)
        raise
    _close(state, None)
    return result


def _init_workers_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return _root_span_call(semconv.SPAN_INIT, wrapped, instance, args, kwargs)


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
