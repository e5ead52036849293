"""Which trajectory trees a worker exports: decided at the end, the slowest first.

The trajectories of one (submit step, validate) group in one agent-loop worker share
``OTEL_VERL_ROLLOUT_SPANS_PER_STEP`` (B) trees. Which one will be the slowest is known only when
they have all ended, so each trajectory is recorded cheaply while it runs and offered here when it
ends (``Round.offer``):

* the ``OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP`` (K, at most B) slowest so far are held in a min-heap;
  one pushed out of it joins the rest;
* of the rest, a uniform random sample of B - K is held (reservoir sampling, Algorithm R): one
  that loses its place is dropped at once, so at most B trees wait for the group's end;
* when the group's last trajectory ends (``Round.finish``) the heap's are kept as ``slowest``
  (rank 1 = the slowest), the sample's as ``sample`` with the rate ``kept / rest``: each sampled
  tree stands for 1 / rate trajectories, slowest ones for themselves.

A failed or cancelled trajectory is never offered: its tree is kept when it ends (``error``),
beyond the budget. B = -1 keeps every tree (the slowest K still marked as such). A group whose
trajectories ended before all had started is decided in rounds (``state.Group.new_round``) that
share B, each keeping at least its own slowest.
"""

from __future__ import annotations

import heapq
import random
from typing import Any


class Round:
    """The offered trajectories of one group whose trees wait for the group's end."""

    __slots__ = ("keep_all", "k", "capacity", "heap", "sample", "rest", "seq", "rng")

    def __init__(self, budget: int, slowest: int, rng: random.Random) -> None:
        self.keep_all = budget < 0
        self.k = max(0, slowest if self.keep_all else min(slowest, budget))
        self.capacity = 0 if self.keep_all else max(0, budget - self.k)
        self.heap: list[tuple[float, int, Any]] = []  # (duration, arrival, item): the slowest k so far
        self.sample: list[Any] = []
        self.rest = 0  # offered trajectories that are not (or no longer) among the slowest k
        self.seq = 0
        self.rng = rng

    def offer(self, duration: float, item: Any) -> tuple[Any, Any]:
        """Take ``item`` (its trajectory took ``duration`` s): (kept now, dropped now), each an item or None."""
        self.seq += 1
        entry = (duration, self.seq, item)
        if self.k:
            if len(self.heap) < self.k:
                heapq.heappush(self.heap, entry)
                return None, None
            entry = heapq.heappushpop(self.heap, entry)  # the fastest of the k + 1 leaves the heap
        return self._rest(entry[2])

    def _rest(self, item: Any) -> tuple[Any, Any]:
        self.rest += 1
        if self.keep_all:
            return item, None
        if len(self.sample) < self.capacity:
            self.sample.append(item)
            return None, None
        j = self.rng.randrange(self.rest)
        if j < self.capacity:  # Algorithm R: each of the rest is in the sample with chance capacity / rest
            out, self.sample[j] = self.sample[j], item
            return None, out
        return None, item

    @property
    def held(self) -> int:
        return len(self.heap) + len(self.sample)

    def finish(self) -> tuple[list[tuple[Any, int]], list[Any], float]:
        """(slowest items with their rank, 1 = slowest; sampled items; their sample rate)."""
        slowest = [(item, rank) for rank, (_, _, item) in enumerate(sorted(self.heap, reverse=True), start=1)]
        rate = 1.0 if self.keep_all or self.rest == 0 else len(self.sample) / self.rest
        sample, self.heap, self.sample = self.sample, [], []
        return slowest, sample, rate
