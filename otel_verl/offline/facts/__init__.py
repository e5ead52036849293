"""What summary and report say about a run, one module per fact: its fold (what it reads of the
run, ``folds.Fold``), its sentence for the summary, its data for the page.

``folds`` is the list of them: the one place the run's reading (``run.model.build`` through
``run_reader``, which imports no fact) learns about a fact. A fact whose ``close`` needs nothing
but its own reading lands in ``Report.facts`` under its name; ``health`` and ``goodput`` also take
the steps' figures and the other facts (``run.model``). The others are rules on a step's spans:
``slowest``, ``tails``, ``time_went``, ``engine``, ``pools``, ``step_trace``.

``step_facts`` is the list of the per-step facts (``folds.StepFact``): each computed from one step's
spans as the model makes its row, kept on the row under its name (``StepRow.facts``), read back by
the renderers with ``StepFact.of(row)``; its run total (``StepFact.total``) and what it says of the
slowest step and trajectory in the health box (``StepFact.slowest_step``, ``slowest_trajectory``),
in this list's order, are in its module too.
"""

from __future__ import annotations

from otel_verl.offline.facts import (
    engine,
    generation,
    goodput,
    health,
    latency,
    overhead,
    pools,
    slowest,
    spool,
    stall,
    step_trace,
    tails,
    time_went,
)
from otel_verl.offline.folds import Fold, StepFact


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


def step_facts() -> tuple[StepFact, ...]:
    """Every per-step fact, computed for each step's row in this order."""
    return (
        tails.RATIO,
        tails.ALL_TRAJECTORIES,
        time_went.ATTRIBUTED,
        time_went.TIME_BY,
        time_went.POLL_LAG,
        pools.STATES,
        pools.REPLICA_IDLE,
        engine.SPLIT,
        step_trace.ERROR,
        step_trace.RANKS,
    )
