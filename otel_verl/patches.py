"""Every patch otel-verl applies at run time, outside a ``HookSet``, and its undoing.

The hooks of a ``HookSet`` are undone by it. A few patches are made later, on objects that exist
only once verl or Ray made them (the actor classes Ray builds in a worker, the SDK tracer's
sampler, ``ThreadPoolExecutor.submit`` in a reward worker): they go through ``wrap`` and
``replace`` here, which remember how to undo them, and ``uninstrument()`` undoes them all
(``undo_all``), newest first. A patch that something else has wrapped again since is left as it
is: unwrapping it would drop that other wrapper too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import wrapt

from otel_verl._safe import warn_once

_lock = threading.Lock()
_undo: list[Callable[[], None]] = []
_ABSENT = object()


def _own(owner: Any, attr: str) -> Any:
    """``attr`` as ``owner`` itself holds it (a class's own ``__dict__`` entry), or ``_ABSENT``."""
    return vars(owner).get(attr, _ABSENT) if hasattr(owner, "__dict__") else getattr(owner, attr, _ABSENT)


def _restorer(owner: Any, attr: str, original: Any, patched: Any) -> Callable[[], None]:
    def restore() -> None:
        if _own(owner, attr) is not patched:
            return  # wrapped again by someone else since, or already restored
        if original is _ABSENT:
            delattr(owner, attr)  # it was inherited: the base's attribute shows again
        else:
            setattr(owner, attr, original)

    return restore


def wrap(owner: Any, attr: str, wrapper: Callable[..., Any]) -> Any:
    """``wrapt.wrap_function_wrapper(owner, attr, wrapper)``, undone by ``undo_all``."""
    original = _own(owner, attr)
    patched = wrapt.wrap_function_wrapper(owner, attr, wrapper)
    with _lock:
        _undo.append(_restorer(owner, attr, original, patched))
    return patched


def replace(owner: Any, attr: str, value: Any) -> None:
    """``setattr(owner, attr, value)``, undone by ``undo_all``."""
    original = _own(owner, attr)
    setattr(owner, attr, value)
    with _lock:
        _undo.append(_restorer(owner, attr, original, value))


def undo_all() -> None:
    """Undo every patch made through this module, newest first."""
    with _lock:
        pending, _undo[:] = list(_undo), []
    for undo in reversed(pending):
        try:
            undo()
        except Exception:  # noqa: BLE001 - uninstrument() must finish
            warn_once("undo patch", "a patch could not be undone", exc_info=True)


def count() -> int:
    """How many patches are in place (tests)."""
    with _lock:
        return len(_undo)
