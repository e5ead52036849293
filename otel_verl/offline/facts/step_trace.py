"""What a step's spans say of its processes: whether a span of its own trace failed, and which
worker ranks sent spans into it (``verl.worker.*``, the step's trace and the rollout traces joined
to it)."""

from __future__ import annotations

from otel_verl import semconv
from otel_verl.offline.folds import StepFact, StepSpans


def failed(step: StepSpans) -> bool:
    """A span of the step's own trace ended with an error status."""
    return any(s.status == "STATUS_CODE_ERROR" for s in step.trace)


def worker_ranks(step: StepSpans) -> list[str]:
    """The ranks that sent ``verl.worker.*`` spans into the step, sorted as text."""
    workers = (s for s in step.members if s.name.startswith(semconv.SPAN_WORKER_PREFIX))
    return sorted({str(r) for s in workers if (r := s.attributes.get(semconv.RES_RANK)) is not None})


# The step's facts (``StepFact.of(row)``).
ERROR: StepFact[bool] = StepFact("error", failed)
RANKS: StepFact[list[str]] = StepFact("worker_ranks", worker_ranks)
