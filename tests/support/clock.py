"""``FakeClock``: a stand-in for a module's monotonic ``clock`` that moves only when a test moves it."""

from __future__ import annotations


class FakeClock:
    """Reads ``now``, which only the test (or ``sleep``) advances."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
