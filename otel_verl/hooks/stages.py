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
  one it runs before (v0 ``start_profile``) is a span of its own with the step number. The
  profiler's two stages get spans only where verl's profiler may run (``global_profiler.steps``
  set): otherwise they time nothing, twice a step (their time stays in ``verl.stage.duration``);
* the ``verl.stage.duration`` histogram is not recorded here but from the ``timing_s/<stage>``
  values verl logs once per step (``otel_verl.instruments.training``): equal to verl's figures by construction,
  and a metric record in the SDK per stage call stays off the training thread's path. Each stage's
  last span context of the step (``PROCESS.stage_spans``) goes with those values, as their exemplar;
* where the step's time went (``accounting``): ``verl.step.time`` by category, ``verl.time.*``
  attributes on the step span, ``verl.trainer.idle_ratio``, v1's ``verl.trainer.poll_lag``; per
  pool role ``verl.pool.time``, ``verl.pool.*`` span attributes, ``verl.rollout.idle_ratio``; per
  role the goodput buckets (``instruments.goodput``: ``verl.goodput.time``, with verl's values of the step);
* at the end of each step: ``verl.training.step``, ``verl.training.steps`` and the
  ``verl.training.last_step.timestamp`` heartbeat.

Spans are made only in the process running the trainer: the agent-loop workers' per-sample
timers would be thousands of spans per step (rollout spans have their own hooks).
An exception inside a stage is recorded on the span and re-raised unchanged.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_verl import per_process, semconv
from otel_verl._safe import safe
from otel_verl.hooks import accounting, targets
from otel_verl.hooks.accounting import ACCOUNT
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.per_trainer import PerTrainer
from otel_verl.hooks.spans import SpanState, close_span, open_span
from otel_verl.hooks.trainer import step_attributes
from otel_verl.instruments.training import TrainingMetrics
from otel_verl.process.state import PROCESS
from otel_verl.stall.watchdog import LONG_STAGES, STEP_CLOCK

STEP = "step"
_open_step: SpanState | None = None  # the ``verl.step`` span open now (training thread), from either source


def _forget() -> None:
    global _open_step
    _open_step = None


per_process.register(__name__, reset=_forget)
PROFILER_STAGES = frozenset({"start_profile", "stop_profile"})  # v0: no-ops unless the profiler is on


def _args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    name = kwargs.get("name", args[0] if args else None)
    timing_raw = kwargs.get("timing_raw", args[1] if len(args) > 1 else None)
    return name, timing_raw


@safe("stage span start")
def _start(name: Any, timing_raw: Any) -> SpanState | None:
    trainer = PROCESS.trainer
    if trainer is None or not isinstance(name, str):
        return None
    if name in PROFILER_STAGES and not _profiler_on(trainer):
        return None
    attrs = step_attributes(trainer)
    parent_id = trace.get_current_span().get_span_context().span_id
    if name == STEP:
        parent = otel_context.Context()  # every step starts its own trace
    else:
        attrs[semconv.ATTR_STAGE] = name
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:
            last = PROCESS.last_step
            if last is not None and last[0] == id(timing_raw):
                parent = trace.set_span_in_context(trace.NonRecordingSpan(last[1]))
    span_name = semconv.SPAN_STEP if name == STEP else semconv.SPAN_STAGE_PREFIX + name
    step, epoch = attrs.get(semconv.ATTR_STEP), attrs.get(semconv.ATTR_EPOCH)
    state = open_span(span_name, context=parent, attributes=attrs, step=step, epoch=epoch)
    span_id = state[0].get_span_context().span_id
    if name == STEP:
        global _open_step
        _open_step = state
        STEP_CLOCK.step_started(attrs.get(semconv.ATTR_STEP), state[0].get_span_context())
        ACCOUNT.step_started(span_id)
        PROCESS.stage_spans = {}
    else:
        ACCOUNT.stage_started(span_id, parent_id)
        if name in LONG_STAGES:  # validation, checkpoint: the stall clock's own norm (stall.watchdog)
            STEP_CLOCK.stage_started(name)
    return state


# whether verl's profiler may run in this job (``global_profiler.steps``); unknown: yes (keep the spans)
_profiler_on = PerTrainer(lambda trainer: bool(trainer.config.global_profiler.steps), True)


def _train_batch_size(trainer: Any) -> int | None:
    value = trainer.config.data.train_batch_size
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# the prompt groups a step of the trainer trains on (``data.train_batch_size``; goodput's ``B``); None when unknown
batch_groups = PerTrainer(_train_batch_size, None)


@safe("stage span end")
def _end(state: SpanState, name: str, timing_raw: Any, error: BaseException | None) -> None:
    span_id = state[0].get_span_context().span_id
    seconds = pools = lag = None
    PROCESS.stage_spans[name] = state[0].get_span_context()  # timing_s/<name>'s exemplar ("step": the step's)
    if name == STEP:
        global _open_step
        _open_step = None
        seconds = ACCOUNT.step_ended(span_id)
        if seconds is not None:
            pools, lag = ACCOUNT.last_pools, ACCOUNT.last_poll_lag
            state[0].set_attributes(accounting.step_span_attributes(seconds, pools))
    else:
        ACCOUNT.stage_ended(span_id, name)
        if name in LONG_STAGES:
            STEP_CLOCK.stage_ended(name)
    close_span(state, error=error)
    if error is None and name == STEP:
        STEP_CLOCK.step_ended()
        PROCESS.last_step = (id(timing_raw), state[0].get_span_context())
        step, ended = getattr(PROCESS.trainer, "global_steps", None), time.time()
        # in the same ordered background queue as the step's Tracking.log values
        # the pipeline of now, not of when the background thread gets to it
        telemetry, training = PROCESS.telemetry, PROCESS.instruments.training
        batch = batch_groups(PROCESS.trainer) if seconds is not None else None
        telemetry.submit(lambda: _step_end(training, step, ended, seconds, pools, lag, batch))


@safe("step end metrics")
def _step_end(
    training: TrainingMetrics,
    step: Any,
    ended: float,
    seconds: dict[str, float] | None,
    pools: dict[tuple[str, str], float] | None = None,
    poll_lag: float | None = None,
    batch_groups: int | None = None,
) -> None:
    idle = accounting.idle_ratio(seconds) if seconds is not None else None
    rollout_idle = accounting.rollout_idle_ratio(pools) if pools else None
    training.record_step_end(
        step if isinstance(step, int) else None, ended, seconds, idle, pools, rollout_idle, poll_lag, batch_groups
    )


def step_open() -> bool:
    """Whether a ``verl.step`` span is open now (the ``step`` timer's or the step callbacks')."""
    return _open_step is not None


def begin_step(timing_raw: Any) -> SpanState | None:
    """Open the step's span as the ``step`` timer does (``hooks.callbacks``: where no timer did)."""
    return _start(STEP, timing_raw)


def end_step(state: SpanState, timing_raw: Any, error: BaseException | None) -> None:
    """Close a span of :func:`begin_step`, with everything the ``step`` timer's end does."""
    _end(state, STEP, timing_raw, error)


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


HOOKS = [Hook(targets.PERFORMANCE, "_timer", _timer_wrapper)]
