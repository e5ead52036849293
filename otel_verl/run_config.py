"""The run's verl config as it travels on ``verl.init`` (attribute ``verl.config``).

verl's resolved config as compact nested JSON, redacted (``otel_verl.redact``: the values under
secret-looking keys, and the credentials inside every other string), at most
``semconv.CONFIG_MAX_BYTES`` (32 KiB; verl 0.9.1's full PPO config is about 25 KB): when too big,
empty values are left out, then the longest values until it fits, and ``_otel_verl_dropped``
counts what was left out. Redaction comes first and the cap leaves whole values out, never cuts
one: what is kept of a value is all of its redacted text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from otel_verl import redact, semconv


def _plain(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        DictConfig = None  # noqa: N806
    if DictConfig is not None and isinstance(cfg, DictConfig):
        try:
            return OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # noqa: BLE001 - an interpolation that does not resolve: keep it as written
            return OmegaConf.to_container(cfg, resolve=False)
    return cfg


def _leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, Mapping) and value:
        out: list[tuple[tuple[str, ...], Any]] = []
        for key, item in value.items():
            out += _leaves(item, (*path, str(key)))
        return out
    return [(path, value)]


def _nest(leaves: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path, value in leaves:
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return root


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


def config_json(cfg: Any, limit: int = semconv.CONFIG_MAX_BYTES) -> str | None:
    """verl's config as compact nested JSON with secrets redacted, at most ``limit`` bytes.

    Redacted before anything is measured or left out: a secret is replaced whole, whatever the cap.

    Too big: empty values are left out, then the longest values until it fits;
    ``_otel_verl_dropped`` (top level) counts the entries left out.
    """
    data = _plain(cfg)
    if not isinstance(data, Mapping):
        return None
    data = redact.redact(data)
    text = _dumps(data)
    if len(text.encode()) <= limit:
        return text
    leaves = [(p, v) for p, v in _leaves(data) if p]
    kept = [(p, v) for p, v in leaves if not (v is None or (isinstance(v, (str, list, tuple, dict)) and not v))]
    sizes = [len(_dumps(v).encode()) + len(p[-1].encode()) + 4 for p, v in kept]
    order = sorted(range(len(kept)), key=sizes.__getitem__)  # shortest first
    while order:
        chosen = sorted(order)  # the config's own order
        nested = _nest([kept[i] for i in chosen])
        nested[semconv.CONFIG_TRUNCATED_KEY] = len(leaves) - len(chosen)
        text = _dumps(nested)
        excess = len(text.encode()) - limit
        if excess <= 0:
            return text
        while order and excess > 0:  # drop the longest values worth at least the excess
            excess -= sizes[order.pop()]
    return None
