"""CPU time otel-verl's hooks spend on verl's own threads, measured around every ``@safe`` call.

Every hook's own work (span start and end, context propagation, handing a step's values to the
recorder, the guard, the pipeline build on first use) runs in a function decorated with
``_safe.safe``; the decorator reads this thread's CPU clock (``time.thread_time_ns``: CPU, not
wall, so a hook that waits costs nothing) before and after it. Counted once per outermost call:
a nested ``@safe`` call is inside its caller's window. Calls in otel-verl's own threads are not
counted here: those threads' whole CPU time is read from their thread clocks
(``process.overhead``), and counting both would count twice.

Not counted: the wrapper frames around a hook (wrapt's proxy, ``call_traced``) and work our hooks
cause later on verl's threads (garbage collection of our objects, Ray pickling a propagated
context). Cost of the measurement itself: two clock reads
(``clock_gettime(CLOCK_THREAD_CPUTIME_ID)``, a system call) and a thread-local look-up per call,
half of it inside the measured window (``tests/unit/test_hook_clock.py`` bounds it).

Each thread adds to its own cell, so the hot path takes no lock; the metric sums the cells.
"""

from __future__ import annotations

import threading
import time

# Threads whose names start so are otel-verl's (``otel-verl-record``, ``-flusher``, ``-flush``,
# ``-metrics``, ``-stall``, ``-stall-watch``) or the SDK batch processors ours start.
OWN_THREAD_PREFIXES = ("otel-verl-", "OtelBatch")

_clock = time.thread_time_ns


class _Local(threading.local):
    cell: list[int] | None = None  # this thread's [ns, calls]; [] in our own threads (not counted)
    busy: bool = False  # inside a measured call: nested ones are not measured again


_local = _Local()
_cells: list[list[int]] = []  # every verl thread's cell; dead threads keep theirs (a cumulative total)
_lock = threading.Lock()


def is_own_thread(name: str) -> bool:
    return name.startswith(OWN_THREAD_PREFIXES)


def _new_cell() -> list[int]:
    cell: list[int] = []
    try:
        if not is_own_thread(threading.current_thread().name):
            cell = [0, 0]
            with _lock:
                _cells.append(cell)
    except Exception:  # noqa: BLE001 - e.g. at interpreter exit: then this thread is not measured
        cell = []
    _local.cell = cell
    return cell


def enter() -> int:
    """This thread's CPU clock in ns when this call is to be measured, else -1."""
    local = _local
    cell = local.cell
    if cell is None:
        cell = _new_cell()
    if not cell or local.busy:
        return -1
    local.busy = True
    return _clock()


def leave(started: int) -> None:
    """End the measurement :func:`enter` started (``started`` >= 0)."""
    local = _local
    cell = local.cell
    if cell:
        cell[0] += _clock() - started
        cell[1] += 1
    local.busy = False


def totals_ns() -> tuple[int, int]:
    """(CPU nanoseconds, measured calls) of hooks on verl's threads in this process so far."""
    with _lock:
        cells = list(_cells)
    return sum(c[0] for c in cells), sum(c[1] for c in cells)


def totals() -> tuple[float, int]:
    """(CPU seconds, measured calls) of hooks on verl's threads in this process so far."""
    ns, calls = totals_ns()
    return ns / 1e9, calls
