"""The current training step for user code: ``current_step()`` and ``step_attributes()``.

The plain OpenTelemetry API cannot know which training step a reward function, a tool or an
agent loop runs for. otel-verl puts the step (and epoch) into the OpenTelemetry context as W3C
baggage (``verl.step``, ``verl.epoch``) where it opens a step, stage or trajectory span; the
context travels with otel-verl's carriers into the worker, agent-loop and reward processes, so
the same call works in every verl process::

    from otel_verl import step_attributes
    hist.record(score, {"data_source": source, **step_attributes()})

Outside any step (or with otel-verl off) both return nothing (``None`` / ``{}``).
"""

from __future__ import annotations

from opentelemetry import baggage
from opentelemetry.context import Context

from otel_verl import semconv

STEP_KEY = semconv.ATTR_STEP
EPOCH_KEY = semconv.ATTR_EPOCH


def with_step(step: int | None, epoch: int | None = None, context: Context | None = None) -> Context | None:
    """``context`` (default: the current one) with the step and epoch as baggage."""
    if step is None or step < 0:
        return context
    ctx = baggage.set_baggage(STEP_KEY, str(step), context=context)
    if epoch is not None:
        ctx = baggage.set_baggage(EPOCH_KEY, str(epoch), context=ctx)
    return ctx


def _int(key: str, context: Context | None) -> int | None:
    value = baggage.get_baggage(key, context=context)
    try:
        return int(value) if value is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def current_step(context: Context | None = None) -> int | None:
    """The training step the current code runs for (verl's ``global_steps``), or None."""
    return _int(STEP_KEY, context)


def current_epoch(context: Context | None = None) -> int | None:
    """The epoch of the current step, where the driver says it (not inside v1 rollouts), or None."""
    return _int(EPOCH_KEY, context)


def step_attributes(context: Context | None = None) -> dict[str, int]:
    """``{"verl.step": n, "verl.epoch": e}`` for the current step (only the keys known).

    Meant for span attributes and log records. On a metric point each step value makes a new
    time series in Prometheus; add it there only for series recorded a few times per step.
    """
    out: dict[str, int] = {}
    step = current_step(context)
    if step is not None:
        out[STEP_KEY] = step
        epoch = current_epoch(context)
        if epoch is not None:
            out[EPOCH_KEY] = epoch
    return out
