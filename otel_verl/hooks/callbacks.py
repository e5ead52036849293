"""verl's documented v1 hooks, attached to each trainer object right after its ``__init__``.

verl's v1 ``PPOTrainer`` calls methods on objects it made itself: the trainer's own template
methods (``on_step_begin``, ``on_step_end``, ... : each trainer mode overrides some) and the
driver-side checkpoint callback (``trainer.checkpoint_callback_class``, verl 0.9.1). A documented
hook survives the refactors that move a private name, so the facts it carries are taken from it.
Each is wrapped on the object (``wrapt`` on the bound method, an attribute of that one object), never
on a class: a wrapper on ``PPOTrainer.on_step_end`` would miss every mode's override, and one on
``CheckpointCallback.on_save`` the user's. So the mode's override and the user's callback run
exactly as without otel-verl, once per call, and ``trainer.checkpoint_callback`` stays the user's
own object (its class, its attributes).

* ``trainer.checkpoint_callback.on_save(trainer, global_step, checkpoint_dir, async_save)``:
  "verl saved step N in folder D" for the guard (``guard.checkpoint``), before the user's callback
  runs; the user's callback's result and exceptions pass through unchanged (verl documents that an
  exception there aborts training). Where verl has no callback (0.9.0) or the object takes no
  wrapper (``__slots__``), the patch of ``PPOTrainer._save_checkpoint`` says it instead.
* ``trainer.on_step_begin`` / ``on_step_end``: the step's span and its end (heartbeat, stall clock,
  accounting), exactly as the ``step`` timer's (``stages``), only where no ``step`` timer span is
  open when the step begins (a verl whose private ``_timer`` moved); with the timer hooked, verl's
  own measure of the step stays the span. A step that raises between the two ends its span in
  the hook on ``fit``, with the error.

They are attached by a hook on ``PPOTrainer.__init__`` (a public name, patched: verl has no hook
for "a trainer was made"), after it returned: the object's class is already its mode's (or the
user's subclass), so each bound method is the final override.

Every attachment and every wrapper is fail-safe: ours is logged once and swallowed, verl's and
the user's pass through.
"""

from __future__ import annotations

import logging
from typing import Any

from otel_verl import per_process
from otel_verl._safe import safe
from otel_verl.hooks import stages, targets
from otel_verl.hooks.guard import checkpoint as guard_checkpoint
from otel_verl.hooks.hookset import Hook, attach_to, in_effect
from otel_verl.hooks.spans import SpanState
from otel_verl.process.state import PROCESS

_log = logging.getLogger("otel_verl")
V1 = targets.TRAINER_V1
CALLBACK = targets.CHECKPOINT_CALLBACK
ON_SAVE = "CheckpointCallback.on_save"
STEP_BEGIN = "PPOTrainer.on_step_begin"
STEP_END = "PPOTrainer.on_step_end"

_step: SpanState | None = None  # the step span the callbacks opened (training thread), until its end


def _forget() -> None:
    global _step
    _step = None


per_process.register(__name__, reset=_forget)


def _on_save(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if in_effect(CALLBACK, ON_SAVE):
        _saved(kwargs)
    return wrapped(*args, **kwargs)  # the user's callback: its result and exceptions are verl's business


@safe("checkpoint callback")
def _saved(kwargs: dict[str, Any]) -> None:
    guard_checkpoint.note_save(kwargs.get("global_step"), kwargs.get("checkpoint_dir"))


def _on_step_begin(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if in_effect(V1, STEP_BEGIN):
        _begin(instance)
    return wrapped(*args, **kwargs)  # the mode's own on_step_begin, inside the step's span


def _on_step_end(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if not in_effect(V1, STEP_END) or _step is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)  # the mode's own on_step_end (sync: update_weights)
    except BaseException as exc:
        end_open_step(exc)
        raise
    end_open_step(None)
    return result


@safe("step callbacks: step start")
def _begin(trainer: Any) -> None:
    global _step
    if stages.step_open():  # the step timer's span: verl's own measure of the step
        return
    end_open_step(None)  # a step the callbacks began and never ended (on_step_end not called)
    _step = stages.begin_step(getattr(trainer, "timing_raw", None))


@safe("step callbacks: step end")
def end_open_step(error: BaseException | None) -> None:
    """End the step span the callbacks opened, if one is open (``fit``'s hook: with its error)."""
    global _step
    state, _step = _step, None
    if state is not None:
        stages.end_step(state, getattr(PROCESS.trainer, "timing_raw", None), error)


_ATTACHED = (
    # (attribute path on the trainer, hook key, wrapper)
    (("checkpoint_callback", "on_save"), (CALLBACK, ON_SAVE), _on_save),
    (("on_step_begin",), (V1, STEP_BEGIN), _on_step_begin),
    (("on_step_end",), (V1, STEP_END), _on_step_end),
)


def attach(trainer: Any) -> None:
    """Attach each documented hook in effect to ``trainer`` (its own object, or one it holds);
    never twice on one object. Each one that cannot be attached is left to its fallback."""
    for path, (module, target), wrapper in _ATTACHED:
        if in_effect(module, target):
            _attach_one(trainer, path, wrapper)


@safe("attach a documented verl hook")
def _attach_one(trainer: Any, path: tuple[str, ...], wrapper: Any) -> None:
    owner = trainer
    for name in path[:-1]:
        owner = getattr(owner, name, None)
    method = getattr(owner, path[-1], None)
    if owner is None or not callable(method) or getattr(method, "_self_wrapper", None) is wrapper:
        return
    try:
        attach_to(owner, path[-1], wrapper)  # this object only: its class stays as it is
    except (AttributeError, TypeError):  # an object that takes no attribute (``__slots__``): the fallback says it
        _log.debug("otel-verl: trainer.%s takes no wrapper; its fallback applies", ".".join(path), exc_info=True)


def _attach_after_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # (a mode's own __init__ runs this one through super())
    attach(instance)
    return result


def _fit_ends_open_step(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        end_open_step(exc)  # the step that raised: its span ends with the error, as the step timer's does
        raise
    end_open_step(None)
    return result


HOOKS = [
    Hook(V1, "PPOTrainer.__init__", _attach_after_init),
    Hook(V1, "PPOTrainer.fit", _fit_ends_open_step),
    Hook(CALLBACK, ON_SAVE, _on_save, optional=True, attach=True),  # verl 0.9.1 on
    Hook(V1, STEP_BEGIN, _on_step_begin, attach=True),
    Hook(V1, STEP_END, _on_step_end, attach=True),
]
