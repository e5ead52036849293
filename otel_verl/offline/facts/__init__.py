"""What summary and report say about a run, one module per fact: its fold (what it reads of the
run, ``folds.Fold``), its sentence for the summary, its data for the page.

``folds`` is the list of them: the one place the run's reading (``run.model.build`` through
``run_reader``, which imports no fact) learns about a fact. A fact whose ``close`` needs nothing
but its own reading lands in ``Report.facts`` under its name; ``health`` and ``goodput`` also take
the steps' figures and the other facts (``run.model``). The others are rules on a step's spans:
``slowest``, ``tails``, ``time_went``, ``engine``, ``pools``.
"""

from __future__ import annotations

from otel_verl.offline.facts import generation, goodput, health, latency, overhead, slowest, spool, stall, tails
from otel_verl.offline.folds import Fold


def folds(include_validation: bool = False) -> dict[str, Fold]:
    """Every fact's fold for one reading of a run, by the fact's name (``include_validation``:
    validation trajectories may be "the slowest", ``slowest.trajectory_pool``)."""
    return {
        "slowest": slowest.Trajectories(include_validation),
        "tails": tails.Tails(include_validation),
        "health": health.HealthFold(),
        "generation": generation.GenerationFold(),
        "goodput": goodput.GoodputFold(),
        "overhead": overhead.OverheadFold([]),
        "spool": spool.Spool(),
        "latency": latency.Durations(),
        "stall": stall.Stall(),
    }
