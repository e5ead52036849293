"""Shared helpers for the bench scripts (not a test): timing and table printing."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence


def per_call_ns(fn: Callable[[], object], n: int) -> float:
    """Nanoseconds per call of ``fn`` over ``n`` calls."""
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - start) / n


def interleaved(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Run each case once per round, alternating, and return the median per case."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            samples[name].append(case())
    return {name: statistics.median(values) for name, values in samples.items()}


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])])


def machine() -> str:
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {platform.machine()}"
    )
