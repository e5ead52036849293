"""Per-process rollout state of an agent-loop worker: open trajectories, step groups, sampling.

The wrappers of one trajectory talk through context variables (``TRAJECTORY``, ``LLM_CALL``,
``BATCH_SPAN``, ``LINK``): asyncio copies them into the tasks verl spawns, so an LLM call or a
tool call finds its trajectory without any argument of verl's carrying it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import OrderedDict
from typing import Any

from opentelemetry.trace import Link, Span, SpanContext

from otel_verl import semconv
from otel_verl.config import settings
from otel_verl.hooks.spans import record_error
from otel_verl.instruments.rollout import RolloutMetrics
from otel_verl.process import worker_metrics
from otel_verl.process.state import PROCESS

MAX_GROUPS = 16  # (step, validate) groups remembered per process for the span budget


class Trajectory:
    """One trajectory (prompt x ``rollout.n``) while it runs."""

    __slots__ = (
        "span",
        "start",
        "key",
        "step",
        "validate",
        "agent",
        "sample_index",
        "rollout_index",
        "prompt_tokens",
        "response_tokens",
        "generated_tokens",
        "num_turns",
        "reward",
        "tokens",
    )

    def __init__(self) -> None:
        self.span: Any = None
        self.prompt_tokens: int | None = None
        self.response_tokens: int | None = None
        self.generated_tokens: int | None = None
        self.num_turns: int | None = None
        self.reward: float | None = None
        self.tokens: tuple[Any, Any] | None = None  # (context var token, OTel context token)


class LLMCall:
    __slots__ = ("span", "start", "attrs", "token")

    def __init__(self, span: Any, start: float, attrs: dict[str, Any]) -> None:
        self.span = span
        self.start = start
        self.attrs = attrs
        self.token: Any = None


class Group:
    """The trajectories of one (submit step, validate) in this worker."""

    __slots__ = ("spans", "in_flight", "done", "batch_span", "link")

    def __init__(self) -> None:
        self.spans = 0
        self.in_flight = 0
        self.done: list[tuple[float, Trajectory]] = []
        self.batch_span: Any = None
        self.link: SpanContext | None = None  # v1: the dispatching span, for the tail span


TRAJECTORY: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar("otel_verl_traj", default=None)
LLM_CALL: contextvars.ContextVar[LLMCall | None] = contextvars.ContextVar("otel_verl_llm", default=None)
BATCH_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar("otel_verl_rollout_batch", default=None)
# v1: the span a dispatch links its trajectories to (set around AgentLoopWorkerTQ.generate_sequences)
LINK: contextvars.ContextVar[SpanContext | None] = contextvars.ContextVar("otel_verl_rollout_link", default=None)


class RolloutState:
    def __init__(self) -> None:
        self.groups: OrderedDict[tuple[int, bool], Group] = OrderedDict()
        self.identified = False
        self.provider: str | None = None

    def group(self, key: tuple[int, bool]) -> Group:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group()
            while len(self.groups) > MAX_GROUPS:
                old_key, old = next(iter(self.groups.items()))
                if old.in_flight:
                    break
                del self.groups[old_key]
        return group


STATE = RolloutState()


def reset() -> None:
    """Forget per-process rollout state (tests)."""
    global STATE
    STATE = RolloutState()


def metrics() -> RolloutMetrics:
    return PROCESS.instruments.rollout


def identify() -> None:
    """The first rollout hook in a process names it an agent-loop worker (the TaskRunner keeps its role)."""
    st = STATE
    if not st.identified:
        st.identified = True
        if PROCESS.trainer is None:
            PROCESS.identify(role=semconv.ROLE_AGENT_LOOP)
            worker_metrics.ensure_worker_metrics()  # process.* gauges (no GPU of its own: none of those)


def sampled(group: Group) -> bool:
    """Whether the next trajectory of ``group`` gets spans (``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``)."""
    budget = settings().rollout_spans_per_step
    if budget < 0:
        return True
    if group.spans >= budget:
        return False
    group.spans += 1
    return True


def links(link: SpanContext | None, step: int) -> list[Link] | None:
    return [Link(link, {semconv.ATTR_STEP: step})] if link is not None else None


def status_of(span: Any, error: BaseException | None) -> str:
    """``ok`` / ``error`` / ``cancelled``; an error is recorded on ``span`` (a cancelled trajectory
    is not an exception event). The caller sets the status attribute with the span's others."""
    status = semconv.STATUS_OK
    if error is not None:
        status = semconv.STATUS_CANCELLED if isinstance(error, asyncio.CancelledError) else semconv.STATUS_ERROR
        record_error(span, error, exception_event=status == semconv.STATUS_ERROR)
    return status
