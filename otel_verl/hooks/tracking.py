"""verl's metrics sink, ``verl.utils.tracking.Tracking.log(data, step)``.

Every numeric value verl logs is recorded (see ``otel_verl.instruments.training``) after verl's own
backends (console, wandb, ...) got it, whatever ``trainer.logger`` says, and the step's
metrics are exported right away (``OTEL_VERL_STEP_EXPORT``). The training thread only hands
over a copy of the dict; recording, collecting and exporting happen in the
background, one step after the other (``Telemetry.submit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.instruments.training import TrainingMetrics
from otel_verl.process.state import PROCESS

if TYPE_CHECKING:  # the SDK is imported where the pipeline is built, not with the hooks
    from opentelemetry.trace import SpanContext

    from otel_verl.process.telemetry import Telemetry


@safe("metrics from Tracking.log")
def _record_now(
    telemetry: Telemetry,
    training: TrainingMetrics,
    data: Mapping[str, Any],
    forward_all: bool,
    stage_spans: Mapping[str, SpanContext],
) -> None:
    training.record_log(data, forward_all=forward_all, stage_spans=stage_spans)
    telemetry.export_now()  # the step's metrics, and its spans too, not 5 s later


@safe("metrics from Tracking.log")
def _record(data: Any) -> None:
    if not isinstance(data, Mapping):
        return
    payload, forward_all = dict(data), settings().forward_metrics  # verl may reuse its dict
    # the pipeline of now, not of when the background thread gets to it
    telemetry, training = PROCESS.telemetry, PROCESS.instruments.training
    stage_spans = dict(PROCESS.stage_spans)  # the step's stage spans: the exemplars of its timing_s values
    telemetry.submit(lambda: _record_now(telemetry, training, payload, forward_all, stage_spans))


def _log_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _record(kwargs["data"] if "data" in kwargs else (args[0] if args else None))
    return result


HOOKS = [Hook(targets.TRACKING, "Tracking.log", _log_wrapper)]
