"""The guard, in the TaskRunner: verl's values of each training step against the rules, then act.

``Tracking.log`` (after verl's own backends) hands the step's dict to the rules (``rules``):
a few comparisons per key on the training thread, which is the decision itself. A rule that fires
is reported (a ``verl.guard`` span in the step's trace with a ``verl.guard.triggered`` event, a log
record, the ``verl.guard.triggered`` counter and one console line, each with the action it got) and
acted on by its own action (``rules.resolve_actions``: its ``OTEL_VERL_GUARD_ACTIONS`` entry, the
rules file's ``action``, else ``OTEL_VERL_GUARD_ACTION``):

* ``record``: report only, the log record at INFO;
* ``alert`` (default; ``observe`` is its former name): report, the log record at WARNING; the
  counter's ``verl.guard.action`` is what the ``VerlGuardTriggered`` alert selects (not ``record``);
* ``checkpoint``: also save a checkpoint through verl's own ``_save_checkpoint`` at the end of that
  step (once per firing), which never removes one of verl's and which ``trainer.resume_mode=auto``
  does not pick unless ``OTEL_VERL_GUARD_RESUME=guard`` (``checkpoint``);
* ``stop``: also checkpoint, then end training after that step: v1's loop ends through its own
  condition (``total_training_steps``), v0's at the start of the next step (``GuardStop`` from the
  ``step`` timer); ``fit`` then returns normally, so verl's end of training, the final flush and
  rc 0 follow (v0: after verl's pending asynchronous checkpoint saves are finished, as at verl's own
  last step). When that checkpoint
  cannot be saved, training still stops (the values that fired are bad), and the console line and
  a WARNING say that it stopped without one. A stop also writes a marker file and can end the job
  with an exit code of its own (``stop_exit``), for a scheduler to tell it from a finished run.

When rules with different actions fire at the same step, the step is checkpointed once if any of
them asks for it, and stopped if any of them says ``stop`` (the stop's reason and marker name those
rules only). ``OTEL_VERL_GUARD_ACTION=off`` turns the whole guard off. A guard error never stops
training: it is logged once and the step goes on.
"""

from __future__ import annotations

import logging
import sys
from collections import ChainMap
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace

from otel_verl import config, per_process, semconv
from otel_verl._safe import safe, warn_once
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.guard import checkpoint as guard_checkpoint
from otel_verl.hooks.guard import stop_exit as guard_exit
from otel_verl.hooks.guard.rules import Evaluator, Firing, RulesLoad, load_rules, resolve_actions
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.spans import start_span
from otel_verl.process.state import PROCESS

_log = logging.getLogger("otel_verl")
TRAINING_STEP_KEY = semconv.STEP_KEY  # both drivers log it with every training step's values


class GuardStop(Exception):
    """Raised at the start of the step after a ``stop``; ``fit``'s hook turns it into a normal return."""


class _Guard:
    def __init__(self) -> None:
        self.evaluator: Evaluator | None = None
        self.actions: dict[str, str] = {}  # rule name -> what it does when it fires
        self.rules_load: RulesLoad | None = None  # the user's rules file, read off the training thread
        self.stop_reason: str | None = None
        self.stopped_after: int | None = None
        self.without_checkpoint: str | None = None  # why a stop has no checkpoint of its step
        self.added: tuple[int, dict[str, float]] | None = None  # otel-verl's own values of a step (add_values)


_GUARD = _Guard()


def reset() -> None:
    """Forget rules, history and a requested stop (tests; a new trainer)."""
    global _GUARD
    _GUARD = _Guard()
    guard_checkpoint.reset()


per_process.register(__name__, reset=reset)


# How long the first training step may wait, once, for the rules file (its read starts with fit).
RULES_WAIT_S = 5.0


@safe("guard rules file")
def _start_reading_rules() -> None:
    path = settings().guard_rules
    if path and _GUARD.rules_load is None:
        _GUARD.rules_load = RulesLoad(path)


def _evaluator() -> Evaluator:
    if _GUARD.evaluator is None:
        _start_reading_rules()
        rules = None
        if _GUARD.rules_load is not None:
            rules, problem = _GUARD.rules_load.result(RULES_WAIT_S)
            if rules is None:
                path = _GUARD.rules_load.path
                warn_once(
                    "guard rules", "ignoring OTEL_VERL_GUARD_RULES=%s (%s); using the built-in rules", path, problem
                )
        rules = rules if rules is not None else load_rules(None)
        s = settings()
        actions, unmatched = resolve_actions(rules, s.guard_actions, s.guard_action)
        if unmatched:
            warn_once(
                "guard actions",
                "%s: %s name(s) no rule (the rules: %s); ignored",
                config.GUARD_ACTIONS_BY_RULE,
                ", ".join(unmatched)[:200],
                ", ".join(r.name for r in rules)[:200],
            )
        _GUARD.actions = actions
        _GUARD.evaluator = Evaluator(tuple(r for r in rules if actions[r.name] != "off"))
    return _GUARD.evaluator


def watches(keys: Iterable[str]) -> bool:
    """Whether a rule the guard evaluates names one of ``keys`` (for a value measured only for it)."""
    evaluator = _evaluator()
    return any(evaluator.watches(key) for key in keys)


def add_values(step: int, values: Mapping[str, float]) -> None:
    """otel-verl's own values of training step ``step`` (``generation``), evaluated with verl's of
    that step, under keys verl never logs; a step's values replace the last step's."""
    _GUARD.added = (step, dict(values))


Acted = list[tuple[Firing, str]]  # the step's firings, each with its action


@safe("guard rules evaluation")
def _evaluate(data: Mapping[str, Any]) -> tuple[int, Acted] | None:
    step = data.get(TRAINING_STEP_KEY)
    if not isinstance(step, int) or isinstance(step, bool):
        return None  # validation before training and other non-step logs
    added, _GUARD.added = _GUARD.added, None
    if added is not None and added[0] == step:
        data = ChainMap(data, added[1])  # verl's own keys first: ours never shadow one of them
    firings = _evaluator().step(data, step)
    return step, [(f, _GUARD.actions[f.rule.name]) for f in firings]


def _attributes(firing: Firing, action: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.ATTR_GUARD_RULE: firing.rule.name,
        semconv.ATTR_GUARD_ACTION: action,
        semconv.ATTR_METRIC_KEY: firing.key,
        semconv.ATTR_GUARD_VALUE: firing.value,
        semconv.ATTR_STEP: firing.step,
    }
    if firing.rule.limit is not None:
        attrs[semconv.ATTR_GUARD_LIMIT] = firing.rule.limit
    if firing.baseline is not None:
        attrs[semconv.ATTR_GUARD_BASELINE] = firing.baseline
    return attrs


SAVES = ("checkpoint", "stop")  # the actions that checkpoint the step


@safe("guard report")
def _report(acted: Acted, checkpoint: str | None) -> None:
    from opentelemetry._logs import SeverityNumber

    last = PROCESS.last_step  # verl logs a step's values after its ``step`` span ended: join that trace
    context = trace.set_span_in_context(trace.NonRecordingSpan(last[1])) if last is not None else None
    span = start_span(semconv.SPAN_GUARD, context=context, attributes={semconv.ATTR_STEP: acted[0][0].step})
    provider = PROCESS.logger_provider()
    logger = provider.get_logger(semconv.SCOPE) if provider is not None else None
    counter = PROCESS.instruments.training.guard_triggered
    for firing, action in acted:
        attrs = _attributes(firing, action)
        if checkpoint and action in SAVES:
            attrs[semconv.ATTR_GUARD_CHECKPOINT] = checkpoint
        text = f"otel-verl guard: {firing.describe()}; action: {action}"
        span.add_event(semconv.EVENT_GUARD_TRIGGERED, attrs)
        counter.add(1, {semconv.ATTR_GUARD_RULE: firing.rule.name, semconv.ATTR_GUARD_ACTION: action})
        if logger is not None:
            severity = SeverityNumber.INFO if action == "record" else SeverityNumber.WARN
            logger.emit(
                event_name=semconv.EVENT_GUARD_TRIGGERED,
                body=text,
                severity_number=severity,
                severity_text="INFO" if action == "record" else "WARNING",
                attributes=attrs,
                context=trace.set_span_in_context(span),
            )
        print(text, file=sys.stdout, flush=True)  # next to verl's own console metrics
    span.end()


@safe("guard stop request")
def _request_stop(trainer: Any, firings: list[Firing], saved: guard_checkpoint.Saved) -> None:
    """End training after this step, and say so, with the checkpoint or clearly without one."""
    step = firings[0].step
    checkpoint, failure = saved.folder, saved.failure
    try:
        # v1's loop runs while global_steps <= total_training_steps: after this step it ends by itself
        trainer.total_training_steps = step
    except Exception:  # noqa: BLE001 - the guard must not end training by itself
        warn_once(
            "guard stop", "the guard could not stop training after step %s; training goes on", step, exc_info=True
        )
        return
    _GUARD.stop_reason = "; ".join(f.describe() for f in firings)
    _GUARD.stopped_after = step
    if checkpoint is None:
        _GUARD.without_checkpoint = failure or "not saved"
    rules = list(dict.fromkeys(f.rule.name for f in firings))
    guard_exit.stopped(trainer, step, rules, _GUARD.stop_reason, saved, _GUARD.without_checkpoint)
    if checkpoint is not None:
        print(f"otel-verl guard: stopping training after step {step}; checkpoint {checkpoint}", flush=True)
        return
    # The values that fired are bad either way: stop, and say that no checkpoint of this step exists.
    text = (
        f"otel-verl guard: stopping training after step {step} WITHOUT a checkpoint of that step "
        f"(saving it failed: {_GUARD.without_checkpoint})"
    )
    print(text, file=sys.stdout, flush=True)
    _log.warning(text)


def _guard_after_log(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    trainer = PROCESS.trainer
    if settings().guard_action == "off" or trainer is None:
        return result
    evaluated = _evaluate(kwargs["data"] if "data" in kwargs else (args[0] if args else {}))
    if evaluated and evaluated[1]:
        step, acted = evaluated
        saves = any(action in SAVES for _, action in acted)
        saved = guard_checkpoint.save(trainer, step) if saves else None
        _report(acted, saved.folder if saved else None)
        if saved is not None:
            _say_resume(saved)
        stops = [firing for firing, action in acted if action == "stop"]
        if stops and saved is not None:
            _request_stop(trainer, stops, saved)
    return result


@safe("guard resume line")
def _say_resume(saved: guard_checkpoint.Saved) -> None:
    """One console line: what ``trainer.resume_mode=auto`` resumes from now, and why."""
    where = f"resumes from {saved.resumes_from}" if saved.resumes_from else "starts from scratch (no checkpoint)"
    print(
        f"otel-verl guard: trainer.resume_mode=auto {where} "
        f"({config.GUARD_RESUME}={settings().guard_resume}; verl's checkpoints are all kept)",
        flush=True,
    )


def _stop_before_step(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    # v0 has no loop condition to end on: the next step ends training before it starts
    if _GUARD.stop_reason is not None and kwargs.get("name", args[0] if args else None) == "step":
        if PROCESS.trainer is not None:
            raise GuardStop(_GUARD.stop_reason)
    return wrapped(*args, **kwargs)


def _fit_until_guard_stop(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    if settings().guard_action != "off":
        _start_reading_rules()  # read while verl starts up, not at the first step
    guard_exit.clear_stale_marker(instance)  # an earlier run's stop: this run's own outcome replaces it
    try:
        return wrapped(*args, **kwargs)
    except GuardStop as stop:
        _finish_v0(instance)
        without = f" (no checkpoint of that step: {_GUARD.without_checkpoint})" if _GUARD.without_checkpoint else ""
        print(f"otel-verl guard: training stopped after step {_GUARD.stopped_after}{without}: {stop}", flush=True)
        return None


def _finish_v0(trainer: Any) -> None:
    """What v0's ``fit`` does at its own last step, skipped by the ``GuardStop`` that ends it: wait
    for verl's asynchronous checkpoint saves (a checkpoint whose writing the job's end would
    otherwise cut short), then end its rollout dump executor. verl's errors pass through."""
    wg = getattr(trainer, "actor_rollout_wg", None)
    if hasattr(wg, "async_calls_finalize_fn_exec"):
        wg.async_calls_finalize_fn_exec(blocking=True)
    shutdown = getattr(trainer, "_shutdown_dump_executor", None)
    if callable(shutdown):
        shutdown()


HOOKS = [
    Hook(targets.TRACKING, "Tracking.log", _guard_after_log),
    Hook(targets.PERFORMANCE, "_timer", _stop_before_step),
    Hook(targets.TRAINER_V0, "RayPPOTrainer.fit", _fit_until_guard_stop),
    Hook(targets.TRAINER_V1, "PPOTrainer.fit", _fit_until_guard_stop),
]
