"""``PerTrainer``: a fact of the run read once from the trainer's config and remembered for that
trainer object (the config is fixed for the run; the hooks ask on every stage or step)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerTrainer(Generic[T]):
    """``read(trainer)``, or ``unknown`` when it raises (another verl's config); asked again only
    for another trainer, or every time for one that cannot be weakly referenced."""

    def __init__(self, read: Callable[[Any], T], unknown: T) -> None:
        self._read = read
        self._unknown = unknown
        self._last: tuple[Any, T] = (None, unknown)  # (weakref to the trainer, its answer)

    def __call__(self, trainer: Any) -> T:
        ref, value = self._last
        if ref is not None and ref() is trainer:
            return value
        try:
            value = self._read(trainer)
        except Exception:  # noqa: BLE001 - another verl's config
            value = self._unknown
        try:
            self._last = (weakref.ref(trainer), value)
        except TypeError:  # not weak-referenceable: asked again next time
            pass
        return value
