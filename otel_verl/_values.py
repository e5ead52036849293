"""Numbers out of the values verl hands around (Python and numpy scalars, one-element tensors)."""

from __future__ import annotations

import numbers
from typing import Any


def as_float(value: Any) -> float | None:
    """The number in ``value`` (Python/numpy scalar, one-element tensor), else None."""
    if type(value) is float:  # most of what verl logs: no further test
        return value
    if isinstance(value, (str, bytes)):
        return None
    # Any failure means "not a number we can record": an int beyond float range
    # (OverflowError), a complex, an object whose ``item()`` raises... must cost only its own key.
    if isinstance(value, numbers.Number):
        try:
            return float(value)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            return None
    # numpy arrays and torch tensors holding exactly one number
    try:
        if not callable(getattr(value, "item", None)):
            return None
        numel = getattr(value, "numel", None)
        count = numel() if callable(numel) else getattr(value, "size", None)
        return float(value.item()) if count == 1 else None
    except Exception:  # noqa: BLE001
        return None


def as_int(value: Any) -> int | None:
    """The integer in ``value`` (int, numpy/torch scalar), else None; bools are not counts."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if hasattr(value, "item"):
            value = value.item()
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None
