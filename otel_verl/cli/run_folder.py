"""What the commands that read a run folder (``summary``, ``report``) share: the option of which
trajectories may be the slowest, and what the process does before it reads."""

from __future__ import annotations

import argparse
import gc


def add_include_validation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--include-validation",
        action="store_true",
        help="let validation trajectories be the slowest too (default: training trajectories only)",
    )


# Container objects allocated (less those freed) between two collections of the youngest
# generation while a run folder is read (Python's default: 700).
READING_GC_THRESHOLD = 10_000


def before_reading() -> None:
    """Before a run folder is read: what this process holds so far (its modules) lives as long as
    it does, so the cyclic collector leaves it out of its scans (``gc.freeze``); else each of the
    collections that a run's millions of short-lived records set off walks all of it again. And
    the collector runs less often (``READING_GC_THRESHOLD``): the reading's records hold no cycles
    (reference counting frees each as it is let go), yet at the default threshold they set off
    collections of the older generations too, each walking all that a long run's reading holds."""
    gc.freeze()
    gc.set_threshold(max(gc.get_threshold()[0], READING_GC_THRESHOLD), *gc.get_threshold()[1:])
