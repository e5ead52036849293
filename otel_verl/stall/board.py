"""The stall board: one small JSON document per run in Ray's GCS key-value store.

The TaskRunner writes it, every verl process of the job reads it (on any host of the cluster:
the GCS is the one place they all reach). Ray's key-value API is private
(``ray.experimental.internal_kv``); when it is missing, the stall doctor says so once, with Ray's
version, and stays off.
"""

from __future__ import annotations

import json
from typing import Any

from otel_verl._safe import warn_once
from otel_verl.hooks.hookset import package_version

NAMESPACE = "otel_verl"


def _kv() -> Any:
    try:
        from ray.experimental import internal_kv

        if not internal_kv._internal_kv_initialized():  # noqa: SLF001 - not in a Ray worker (yet)
            return None
        return internal_kv
    except Exception:  # noqa: BLE001
        warn_once(
            "stall board",
            "Ray %s has no usable internal_kv; the stall doctor is off",
            package_version("ray"),
            exc_info=True,
        )
        return None


def _key(run_id: str) -> bytes:
    return f"stall:{run_id}".encode()


def publish(run_id: str, state: dict[str, Any]) -> bool:
    kv = _kv()
    if kv is None:
        return False
    kv._internal_kv_put(_key(run_id), json.dumps(state).encode(), overwrite=True, namespace=NAMESPACE)  # noqa: SLF001
    return True


def read(run_id: str) -> dict[str, Any] | None:
    kv = _kv()
    if kv is None:
        return None
    raw = kv._internal_kv_get(_key(run_id), namespace=NAMESPACE)  # noqa: SLF001
    if not raw:
        return None
    try:
        state = json.loads(raw)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None
