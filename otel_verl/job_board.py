"""The job board: one small JSON document per run and topic in Ray's GCS key-value store.

The TaskRunner writes it, every verl process of the job reads it (on any host of the cluster:
the GCS is the one place they all reach). Topics, each its writer's and readers' own: ``stall``
(the stall doctor's decision: ``stall.watchdog`` writes, ``stall.reporter`` reads) and ``guard``
(a guard stop, which the launcher reads for its exit code: ``hooks.guard.stop_exit``). Ray's
key-value API is private (``ray.experimental.internal_kv``, looked up through
``otel_verl.private_api``); when it is missing, that is said once, with Ray's version, and the
stall doctor and a guard stop's exit code are off (training is unaffected).
"""

from __future__ import annotations

import json
from typing import Any

from otel_verl import private_api

NAMESPACE = "otel_verl"
_KV = "ray.experimental.internal_kv"
_OFF = "the stall doctor is off, and a guard stop's exit code with it"


def _kv() -> tuple[Any, Any] | None:
    """Ray's private key-value ``(put, get)``, or None: not in a Ray process yet, or Ray renamed them
    (said once with Ray's version; what reads the board is then off, training is unaffected)."""
    found = []
    for name in ("_internal_kv_initialized", "_internal_kv_put", "_internal_kv_get"):
        value = private_api.import_attribute(_KV, name, dists=("ray",), effect=_OFF)
        if value is None:
            return None  # the first missing name is said; the doctor is off either way
        found.append(value)
    initialized, put, get = found
    return (put, get) if initialized() else None


STALL = "stall"
GUARD = "guard"


def _key(run_id: str, topic: str = STALL) -> bytes:
    return f"{topic}:{run_id}".encode()


def publish(run_id: str, state: dict[str, Any], topic: str = STALL) -> bool:
    kv = _kv()
    if kv is None:
        return False
    kv[0](_key(run_id, topic), json.dumps(state).encode(), overwrite=True, namespace=NAMESPACE)
    return True


def read(run_id: str, topic: str = STALL) -> dict[str, Any] | None:
    kv = _kv()
    if kv is None:
        return None
    raw = kv[1](_key(run_id, topic), namespace=NAMESPACE)
    if not raw:
        return None
    try:
        state = json.loads(raw)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None
