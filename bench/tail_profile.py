"""Where otel-verl's hook CPU per rollout trajectory goes: ``bench/tail_cost.py --micro``'s process,
with a thread-clock timer around every ``@safe`` hook, per hook (its cause).

``otel_verl._safe.safe`` is wrapped before ``bench/_tail_micro.py`` instruments, so every hook is
timed: total and self time (less the nested hooks) in microseconds per trajectory, over all the
steps, the warm-up one included (its one-time work shows as such, e.g. ``worker-metrics``). Each
timer adds two clock reads to its hook. ``--steps`` (default 3); to profile another tree put its
copy of ``otel_verl`` first on ``PYTHONPATH``.

``python bench/tail_profile.py [--steps 3]``
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    ns = parser.parse_args(argv)
    total: dict[str, int] = defaultdict(int)
    own: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    stack: list[int] = []  # per open timed hook: its nested hooks' time so far
    clock = time.thread_time_ns

    from otel_verl import _safe

    plain = _safe.safe

    def safe(cause: str, default: Any = None) -> Callable[[Any], Any]:
        deco = plain(cause, default)

        def timed_deco(fn: Any) -> Any:
            inner = deco(fn)

            @functools.wraps(fn)
            def timed(*args: Any, **kwargs: Any) -> Any:
                stack.append(0)
                started = clock()
                try:
                    return inner(*args, **kwargs)
                finally:
                    took = clock() - started
                    nested = stack.pop()
                    total[cause] += took
                    own[cause] += took - nested
                    calls[cause] += 1
                    if stack:
                        stack[-1] += took

            return timed

        return timed_deco

    _safe.safe = safe  # type: ignore[assignment]
    sys.argv = [sys.argv[0], "1"]  # _tail_micro.py instruments at import when so
    import _tail_micro
    import tail_cost

    _tail_micro.MICRO_STEPS = max(2, ns.steps)
    _tail_micro.main()
    n = _tail_micro.MICRO_STEPS * tail_cost.PROMPTS * tail_cost.N
    print(f"{'hook (cause)':36s} {'calls':>7s} {'total us':>9s} {'self us':>8s}   per trajectory")
    for cause in sorted(own, key=lambda c: -own[c]):
        print(f"{cause:36s} {calls[cause] / n:7.2f} {total[cause] / 1e3 / n:9.1f} {own[cause] / 1e3 / n:8.1f}")
    print(f"{'sum of self times':36s} {'':7s} {'':9s} {sum(own.values()) / 1e3 / n:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
