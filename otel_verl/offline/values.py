"""Small rules over the values the reader hands on: an attribute as a number, a point's attributes as a
key, the process a point came from.
"""

from __future__ import annotations

from typing import Any

from otel_verl import semconv

INSTANCE = semconv.RES_SERVICE_INSTANCE_ID


def as_number(value: Any) -> float | None:
    """An attribute that should be a number, as one; None when it is not (a bool is not one either)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def attr_key(attributes: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A metric point's attributes as a hashable, ordered key."""
    return tuple(sorted((k, str(v)) for k, v in attributes.items()))


def exporter(resource: dict[str, Any]) -> str:
    """The process a metric point came from: its ``service.instance.id``, else its pid."""
    return str(resource.get(INSTANCE) or resource.get(semconv.RES_PROCESS_PID))


MAX_ATTR_KEYS = 4096  # attribute sets whose ``attr_key`` an ``AttrKeys`` remembers (a run has a few hundred)


class AttrKeys:
    """``attr_key`` of a point's attributes, made once per dict: the reader hands equal attribute
    sets over as one dict (each dict is held, so its id names no other)."""

    def __init__(self) -> None:
        self._keys: dict[int, tuple[dict[str, Any], tuple]] = {}  # id of attributes -> (them, attr_key)

    def __call__(self, attributes: dict[str, Any]) -> tuple:
        if not attributes:
            return ()
        found = self._keys.get(id(attributes))
        if found is not None and found[0] is attributes:
            return found[1]
        if len(self._keys) >= MAX_ATTR_KEYS:
            self._keys.clear()
        key = attr_key(attributes)
        self._keys[id(attributes)] = (attributes, key)
        return key


def share(shared: dict[tuple, dict[str, Any]], value: dict[str, Any]) -> dict[str, Any]:
    """``value``, or the equal dict already in ``shared``: a long run's many exports of one process
    hold one copy of its resource."""
    try:
        return shared.setdefault(tuple(sorted(value.items())), value)
    except TypeError:  # an unhashable or unorderable value: kept as it is
        return value
