"""Per-process rollout state of an agent-loop worker: open trajectories, step groups, their trees.

The wrappers of one trajectory talk through context variables (``TRAJECTORY``, ``LLM_CALL``,
``BATCH_SPAN``, ``LINK``): asyncio copies them into the tasks verl spawns, so an LLM call or a
tool call finds its trajectory without any argument of verl's carrying it.

A recorded trajectory keeps its own span and its LLM and tool calls as records
(``otel_verl.hooks.rollout.span_records``), the spans others start under it in its ``TreeBuffer`` tree,
and the reward worker's handed-back spans as wire data, until ``keep`` decides whether its tree
is exported: at most ``MAX_CHILDREN`` records and ``MAX_HANDBACKS`` hand-backs per trajectory
(more are counted on the trajectory span, ``verl.rollout.tree.dropped_spans``).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Link, Span, SpanContext

from otel_verl import per_process, semconv
from otel_verl.config import settings
from otel_verl.hooks.rollout.health import Limits, Tally
from otel_verl.hooks.rollout.keep import Round
from otel_verl.hooks.rollout.span_records import Rec
from otel_verl.instruments.rollout import RolloutMetrics
from otel_verl.process import worker_metrics
from otel_verl.process.state import PROCESS

# The clock trajectory and LLM-call durations are read on (what the histograms and the choice of the
# slowest see): one seam, so that tests can drive it.
clock: Callable[[], float] = time.perf_counter

MAX_GROUPS = 16  # (step, validate) groups remembered per process for the span budget
MAX_CHILDREN = 256  # LLM-call and tool records of one trajectory
MAX_HANDBACKS = MAX_CHILDREN + 8  # hand-backs of one trajectory: each scoring call, each LLM call's engine spans
MAX_DURATIONS = 65536  # trajectory durations a group keeps for its median (a uniform sample beyond)


class Trajectory:
    """One trajectory (prompt x ``rollout.n``) while it runs."""

    __slots__ = (
        "rec",
        "kept",
        "tree",
        "trace_state",
        "children",
        "handbacks",
        "dropped",
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
        "repetition",
        "degenerate",
        "tokens",
    )

    def __init__(self) -> None:
        self.rec: Rec | None = None  # its span, as a record; None: not recorded (budget 0, not sampled)
        self.kept: tuple[int, int] | None = None  # (trace id, span id) once its tree was exported
        self.tree: Any = None  # its TreeBuffer tree (spans others start under it)
        self.trace_state: Any = None
        self.children: list[Rec] = []  # LLM and tool calls
        self.handbacks: list[Any] = []  # the reward worker's spans of it, as wire data
        self.dropped = 0  # records and hand-backs left out by the bounds
        self.prompt_tokens: int | None = None
        self.response_tokens: int | None = None
        self.generated_tokens: int | None = None
        self.num_turns: int | None = None
        self.reward: float | None = None
        self.repetition: float | None = None  # of its response (``health``), once measured
        self.degenerate: tuple[str, ...] | None = None  # the degenerate kinds it is, once measured
        self.tokens: tuple[Any, Any] | None = None  # (context var token, OTel context token)

    def child(self, rec: Rec) -> bool:
        """Add an LLM or tool call record; False (counted) beyond ``MAX_CHILDREN``."""
        if len(self.children) < MAX_CHILDREN:
            self.children.append(rec)
            return True
        self.dropped += 1
        return False

    def handback(self, data: Any) -> None:
        if len(self.handbacks) < MAX_HANDBACKS:
            self.handbacks.append(data)
        else:
            self.dropped += 1


class LLMCall:
    __slots__ = ("rec", "start", "attrs", "token", "trajectory", "gen_ai", "input_tokens")

    def __init__(
        self,
        rec: Rec | None,
        start: float,
        attrs: dict[str, Any],
        trajectory: Any = None,
        gen_ai: GenAIAttributes | None = None,
        input_tokens: int | None = None,
    ) -> None:
        self.rec = rec
        self.start = start
        self.attrs = attrs
        self.token: Any = None
        self.trajectory: Trajectory | None = trajectory  # the one it was made in: its exemplar's span
        self.gen_ai = gen_ai  # the GenAI client metrics' attributes
        self.input_tokens = input_tokens  # its prompt's token ids (the span has them only when recorded)


class GenAIAttributes:
    """The attributes of the GenAI client metrics of this process's LLM calls, made once (the
    provider and the model are the process's): the duration's, the input and the output tokens'."""

    __slots__ = ("duration", "input", "output")

    def __init__(self, base: dict[str, Any]) -> None:
        self.duration = base
        self.input = {**base, semconv.GEN_AI_TOKEN_TYPE: semconv.GEN_AI_TOKEN_TYPE_INPUT}
        self.output = {**base, semconv.GEN_AI_TOKEN_TYPE: semconv.GEN_AI_TOKEN_TYPE_OUTPUT}


class Group:
    """The trajectories of one (submit step, validate) in this worker."""

    __slots__ = (
        "in_flight",
        "batch_span",
        "link",
        "round",
        "kept",
        "counts",
        "not_kept",
        "rate",
        "durations",
        "seen",
        "slowest",
        "health",
    )

    def __init__(self) -> None:
        self.in_flight = 0
        self.batch_span: Any = None
        self.link: SpanContext | None = None  # v1: the dispatching span, for the tail span
        self.round: Round | None = None  # the trees waiting for this group's end
        self.kept = 0  # trees kept by earlier rounds (not failed ones): what is left of the budget
        # since the group's last end (what its slowest-trajectory event says): trees kept per reason, not kept
        self.counts = dict.fromkeys((semconv.KEPT_SLOWEST, semconv.KEPT_SAMPLE, semconv.KEPT_ERROR), 0)
        self.not_kept = 0
        self.rate: float | None = None  # the sample rate of the last finished round
        self.durations: list[float] = []  # of the ended (not cancelled) trajectories since the last end
        self.seen = 0
        self.slowest: tuple[float, Trajectory] | None = None
        self.health = Tally()  # its degenerate responses since the last end

    def ended(self, duration: float, st: Trajectory) -> None:
        """Note an ended trajectory for the tail figures (bounded: a uniform sample of durations)."""
        self.seen += 1
        if len(self.durations) < MAX_DURATIONS:
            self.durations.append(duration)
        else:
            j = _RNG.randrange(self.seen)
            if j < MAX_DURATIONS:
                self.durations[j] = duration
        if self.slowest is None or duration >= self.slowest[0]:  # ties: the later one, as the heap keeps
            self.slowest = (duration, st)

    def new_round(self) -> Round:
        budget = settings().rollout_spans_per_step
        if budget > 0:
            # A group that ended before all its trajectories had started (v1 hands a prompt's
            # rollouts out one prompt at a time) is decided in rounds sharing the budget; each round
            # still keeps its slowest, so the step's slowest is always kept (at most 1 over per round).
            budget = max(1, budget - self.kept)
        self.round = Round(budget, settings().rollout_slowest_per_step, _RNG)
        return self.round


_RNG = random.Random()


def new_id(bits: int = 64) -> int:
    """A random span (or trace) id, as the SDK's ``RandomIdGenerator`` makes them."""
    value = random.getrandbits(bits)
    while not value:
        value = random.getrandbits(bits)
    return value


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
        self.model: str | None = None  # gen_ai.request.model ("" when the config names none)
        self.gen_ai: GenAIAttributes | None = None  # the GenAI client metrics' attributes, once known
        self.limits: Limits | None = None  # what responses are measured against (the worker's, read once)

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


per_process.register(__name__, reset=reset)


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


def recording() -> bool:
    """Whether trajectories are recorded at all (``OTEL_VERL_ROLLOUT_SPANS_PER_STEP`` is not 0)."""
    return settings().rollout_spans_per_step != 0


def links(link: SpanContext | None, step: int) -> list[Link] | None:
    return [Link(link, {semconv.ATTR_STEP: step})] if link is not None else None


def status_of(error: BaseException | None) -> str:
    """``ok`` / ``error`` / ``cancelled``."""
    if error is None:
        return semconv.STATUS_OK
    return semconv.STATUS_CANCELLED if isinstance(error, asyncio.CancelledError) else semconv.STATUS_ERROR


def ended(rec: Rec | None, end_ns: int, status: str, error: BaseException | None) -> None:
    """End ``rec`` with ``status``; an error is recorded on it (a cancelled call is no exception event).
    The caller sets the status attribute with the record's others."""
    if rec is None:
        return
    rec.end_ns = max(end_ns, rec.start_ns)
    if error is not None:
        rec.error(error, rec.end_ns, event=status == semconv.STATUS_ERROR)
