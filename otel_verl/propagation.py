"""Trace context across Ray: carried inside the data verl already sends to its workers.

Ray does not carry OpenTelemetry context across an actor call. verl's worker-group calls
pass one data object per call (a ``TensorDict`` on the v0 driver, a TransferQueue
``KVBatchMeta``/``BatchMeta`` on v1, a ``DataProto`` elsewhere); the W3C ``traceparent`` rides in it
under ``CARRIER_KEY`` as a non-tensor entry / ``extra_info`` / ``meta_info`` item, the same
places verl puts its own per-call options. The driver removes it again right after the
call and the worker takes it out before verl's code sees the data, so verl never
observes the key; a call without a carrier works exactly as before.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context

CARRIER_KEY = "_otel_verl_traceparent"


def _kind(data: Any) -> str | None:
    name = type(data).__name__
    if name == "TensorDict":
        return "td"
    # v1: the driver passes a KVBatchMeta; verl's dispatch hands each rank a BatchMeta chunk
    if name in ("KVBatchMeta", "BatchMeta") and isinstance(getattr(data, "extra_info", None), dict):
        return "kv"
    if name == "DataProto" and isinstance(getattr(data, "meta_info", None), dict):
        return "dp"
    return None


def find_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The data object of a worker call: ``data=`` or the first positional argument."""
    data = kwargs.get("data", args[0] if args else None)
    return data if _kind(data) else None


def inject(data: Any) -> bool:
    """Put the current context into ``data``; returns whether it did."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return False
    value = json.dumps(carrier)
    kind = _kind(data)
    if kind == "td":
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor_data(data, CARRIER_KEY, value)
    elif kind == "kv":
        data.extra_info[CARRIER_KEY] = value
    elif kind == "dp":
        data.meta_info[CARRIER_KEY] = value
    else:
        return False
    return True


def take(data: Any) -> Context | None:
    """Remove the carrier from ``data`` and return the context it held, if any."""
    kind = _kind(data)
    value: Any = None
    if kind == "td":
        if CARRIER_KEY in data.keys():
            from verl.utils import tensordict_utils as tu

            value = tu.pop(data, CARRIER_KEY)
    elif kind == "kv":
        value = data.extra_info.pop(CARRIER_KEY, None)
    elif kind == "dp":
        value = data.meta_info.pop(CARRIER_KEY, None)
    if not isinstance(value, str):
        return None
    try:
        return propagate.extract(json.loads(value))
    except ValueError:
        return None
