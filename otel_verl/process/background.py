"""``OrderedWorker``: one daemon thread that handles queued items in submission order.

The one bounded queue-plus-thread of otel-verl: the step recorder (``Telemetry.submit``), the span
flusher and the step metric reader's exports all run on one each. Bounded: when full, the oldest
item is dropped, so a stuck exporter never grows memory or blocks the training thread that
submits. A queue of data names what it holds (``drops``): each drop is then counted and said
(``otel_verl.instruments.drops``); one of requests that coalesce (the flusher's) names nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from otel_verl.instruments import drops

T = TypeVar("T")
_log = logging.getLogger(__name__)


class OrderedWorker(Generic[T]):
    def __init__(
        self,
        name: str,
        handle: Callable[[T], None],
        maxlen: int,
        *,
        idle_s: float | None = None,
        on_idle: Callable[[], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        drops: str | None = None,
    ) -> None:
        self._name = name
        self._handle = handle
        self._items: deque[T] = deque(maxlen=maxlen)
        self._cv = threading.Condition()
        self._busy = False
        self._stopped = False
        self._idle_s = idle_s if on_idle is not None else None
        self._on_idle = on_idle
        self._on_error = on_error
        self._thread: threading.Thread | None = None
        self._drops = drops  # semconv.DROPPED_*: what a drop loses, or None (a coalescing queue)
        self.dropped = 0

    def start(self) -> None:
        with self._cv:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def put(self, item: T) -> None:
        """Queue ``item`` (never blocks); starts the thread on first use."""
        with self._cv:
            if self._stopped:
                return
            full = len(self._items) == self._items.maxlen
            if full:
                self.dropped += 1
            self._items.append(item)
            self._start_locked()
            self._cv.notify_all()
        if full and self._drops is not None:
            drops.dropped(self._drops, self.capacity)  # outside the lock: it may log

    @property
    def pending(self) -> int:
        return len(self._items)

    @property
    def capacity(self) -> int:
        return self._items.maxlen or 0

    def drain(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until every queued item is handled."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._items and not self._busy, timeout_s)

    def stop(self, timeout_s: float) -> None:
        """Handle what is queued (bounded), then end the thread."""
        self.drain(timeout_s)
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _next(self) -> tuple[bool, T | None]:
        """(True, item) to handle, (False, None) for an idle tick; raises StopIteration at the end."""
        with self._cv:
            while not self._items:
                self._busy = False
                self._cv.notify_all()
                if self._stopped:
                    raise StopIteration
                if not self._cv.wait(self._idle_s) and not self._items and not self._stopped:
                    return False, None  # timed out: the idle work (periodic collection)
            self._busy = True
            return True, self._items.popleft()

    def _run(self) -> None:
        while True:
            try:
                has_item, item = self._next()
            except StopIteration:
                return
            try:
                if has_item:
                    self._handle(item)  # type: ignore[arg-type]
                elif self._on_idle is not None:
                    self._on_idle()
            except Exception as exc:  # noqa: BLE001 - never lose the thread
                if self._on_error is not None:
                    self._on_error(exc)
                else:
                    _log.debug("%s failed", self._name, exc_info=True)
