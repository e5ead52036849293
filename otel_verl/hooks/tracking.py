"""verl's metrics sink, ``verl.utils.tracking.Tracking.log(data, step)``.

Every numeric value verl logs is recorded (see ``otel_verl.metrics``) after verl's own
backends (console, wandb, ...) got it, whatever ``trainer.logger`` says, and the step's
metrics are exported right away (``OTEL_VERL_STEP_EXPORT``). The training thread only hands
over a copy of the dict (~10 us); recording, collecting and exporting happen in the
background, one step after the other (``Telemetry.record_step``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import Hook
from otel_verl.runtime import RUNTIME


@safe("metrics from Tracking.log")
def _record_now(data: Mapping[str, Any], forward_all: bool) -> None:
    RUNTIME.metrics.record_log(data, forward_all=forward_all)
    RUNTIME.telemetry.export_now()  # the step's metrics, and its spans too, not 5 s later


@safe("metrics from Tracking.log")
def _record(data: Any) -> None:
    if not isinstance(data, Mapping):
        return
    payload, forward_all = dict(data), settings().forward_metrics  # verl may reuse its dict
    RUNTIME.telemetry.record_step(lambda: _record_now(payload, forward_all))


def _log_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _record(kwargs["data"] if "data" in kwargs else (args[0] if args else None))
    return result


HOOKS = [Hook("verl.utils.tracking", "Tracking.log", _log_wrapper)]
