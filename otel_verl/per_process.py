"""Every piece of per-process state, known in one place: one ``reset()``, one ``after_fork()``.

A module that keeps state for the life of its process (a singleton, a cache, counts, a spool)
registers it here once, at import: ``register(__name__, reset=..., after_fork=...)``.

- ``reset()`` brings every registered state back to what a process that just started holds
  (the tests, between two tests: each test is a process of its own). The pipelines a test built
  are shut down, bounded, their threads ended (``otel_verl.process.telemetry``): none runs on into
  the next test.
- ``after_fork()`` runs in a forked child, from the one ``os.register_at_fork`` handler of
  otel-verl: each registered ``after_fork`` in the order the modules registered (their import
  order), each on its own (one that raises does not stop the next, as with separate fork
  handlers). Only state that a child must not share with its parent has one: locks another
  thread of the parent may hold, descriptors, a thread of the parent's.

Only the standard library is imported here: every module, ``_safe`` included, may register.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

Call = Callable[[], None]

# module name -> (reset, after_fork), in registration order; a module registered again (reload)
# keeps its place
_STATES: dict[str, tuple[Call | None, Call | None]] = {}


def register(name: str, reset: Call | None = None, after_fork: Call | None = None) -> None:
    """Say how ``name``'s state (a module's ``__name__``) is reset and kept right in a forked child."""
    _STATES[name] = (reset, after_fork)


def registered() -> list[str]:
    """The modules whose state is known here, in registration order."""
    return list(_STATES)


def reset() -> None:
    """Every registered state as in a process that just started, the last registered first (a
    module registers after the modules it imports: what uses a state is reset before it)."""
    for reset_one, _ in reversed(list(_STATES.values())):
        if reset_one is not None:
            reset_one()


def after_fork() -> None:
    """In a forked child: every registered ``after_fork``, in registration order."""
    for name, (_, after_fork_one) in list(_STATES.items()):
        if after_fork_one is None:
            continue
        try:
            after_fork_one()
        except Exception:  # noqa: BLE001 - as a separate fork handler's error: the next one still runs
            logging.getLogger("otel_verl").debug("after-fork of %s failed", name, exc_info=True)


os.register_at_fork(after_in_child=after_fork)
