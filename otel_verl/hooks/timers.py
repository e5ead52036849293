"""Step and stage spans from verl's timers.

Every stage verl times (``gen``, ``reward``, ``old_log_prob``, ``ref``, ``values``, ``adv``,
``update_critic``, ``update_actor``, ``update_weights``, ``save_checkpoint``, ``testing``
and any other ``marked_timer``/``simple_timer`` name) goes through one generator,
``verl.utils.profiler.performance._timer`` (verl 0.5 - 0.9), whatever module imported
``marked_timer``. Wrapping it gives:

* ``verl.step``: the root span of one training step's trace (attributes ``verl.step``,
  ``verl.epoch``, ``verl.driver``);
* ``verl.<stage>``: a child span per stage, attribute ``verl.stage``. Stages verl runs
  after the ``step`` timer (``testing``, v0 ``stop_profile``) join the same step's trace;
  one it runs before (v0 ``start_profile``) is a span of its own with the step number;
* the ``verl.stage.duration`` histogram, fed with exactly the seconds verl adds to its
  ``timing_raw`` dict (so it equals ``timing_s/<stage>``);
* at the end of each step: ``verl.training.step``, ``verl.training.steps`` and the
  ``verl.training.last_step.timestamp`` heartbeat.

Spans are made only in the process running the trainer: the agent-loop workers' per-sample
timers would be thousands of spans per step (rollout spans have their own hooks).
An exception inside a stage is recorded on the span and re-raised unchanged.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.hooks import Hook, end_span
from otel_verl.hooks.trainer import step_attributes
from otel_verl.runtime import RUNTIME

STEP = "step"


def _args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    name = kwargs.get("name", args[0] if args else None)
    timing_raw = kwargs.get("timing_raw", args[1] if len(args) > 1 else None)
    return name, timing_raw


@safe("stage span start")
def _start(name: Any, timing_raw: Any) -> tuple[Any, Any, float] | None:
    trainer = RUNTIME.trainer
    if trainer is None or not isinstance(name, str):
        return None
    attrs = step_attributes(trainer)
    if name == STEP:
        parent = otel_context.Context()  # every step starts its own trace
    else:
        attrs[semconv.ATTR_STAGE] = name
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:
            last = RUNTIME.last_step
            if last is not None and last[0] == id(timing_raw):
                parent = trace.set_span_in_context(trace.NonRecordingSpan(last[1]))
    span_name = semconv.SPAN_STEP if name == STEP else semconv.SPAN_STAGE_PREFIX + name
    span = RUNTIME.telemetry.tracer.start_span(span_name, context=parent, attributes=attrs)
    token = otel_context.attach(trace.set_span_in_context(span))
    before = timing_raw.get(name, 0.0) if isinstance(timing_raw, dict) else 0.0
    return span, token, before


@safe("stage span end")
def _end(state: tuple[Any, Any, float], name: str, timing_raw: Any, error: BaseException | None) -> None:
    span, token, before = state
    otel_context.detach(token)
    end_span(span, error)
    if error is not None:
        return
    metrics = RUNTIME.metrics
    if isinstance(timing_raw, dict) and isinstance(timing_raw.get(name), (int, float)):
        metrics.record_stage(name, timing_raw[name] - before)
    if name == STEP:
        RUNTIME.last_step = (id(timing_raw), span.get_span_context())
        metrics.record_step_end(getattr(RUNTIME.trainer, "global_steps", None))


def _timer_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # A generator, like the original: callers do ``yield from _timer(name, timing_raw)``.
    name, timing_raw = _args(args, kwargs)
    state = _start(name, timing_raw)
    if state is None:
        return (yield from wrapped(*args, **kwargs))
    try:
        result = yield from wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(state, name, timing_raw, None if isinstance(exc, GeneratorExit) else exc)
        raise
    _end(state, name, timing_raw, None)
    return result


HOOKS = [Hook("verl.utils.profiler.performance", "_timer", _timer_wrapper)]
