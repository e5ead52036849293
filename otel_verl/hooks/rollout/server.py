"""The rollout replicas' own clock: busy seconds per replica, measured in the LLM server actor.

verl's rollout servers (``vLLMHttpServer``, ``SGLangHttpServer``, ``TRTLLMHttpServer``, or a
custom backend's server registered through ``RolloutReplicaRegistry``) are Ray actors that the
agent-loop workers' ``LLMServerClient`` calls as ``generate(prompt_ids=..., sampling_params=...,
request_id=...)``. A replica is busy while at least one request is inside its ``generate``. That
union of request intervals is what no client can compute live: each agent-loop worker sees only
its own calls (``otel-verl report`` derives it offline from every worker's LLM-call spans).

``verl.rollout.replica.busy_time`` (observable counter, s; attribute ``verl.rollout.replica``, the
replica rank) is its running total: a replica's busy share over a window is
``rate(verl_rollout_replica_busy_time_seconds_total[5m])`` and its idle share one minus that.

Servers are found by that protocol, not by class name: ``ray_actor`` wraps ``generate`` of any
Ray actor class whose ``generate`` takes ``prompt_ids``, ``sampling_params`` and ``request_id``.
The process is named ``verl.process.role=rollout_server``. It has no step boundary: it exports
when it goes idle (``IdleExport``), about once per step in the synchronous modes. The wrapper
costs two lock-guarded updates per request (bench/README.md has the figure).

The same wrapper takes the LLM call's trace context off the request id (``engine_context``) before
verl's ``generate`` sees it, and keeps it for the engine call of that request (``engine``); the
engine's spans of a call whose trajectory is not decided yet go back with the reply
(``engine_handback``).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import per_process, semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks.rollout import engine_context, engine_handback, engine_metrics
from otel_verl.instruments import catalog
from otel_verl.process.idle_export import IdleExport
from otel_verl.process.span_trees import Tree
from otel_verl.process.state import PROCESS

PROTOCOL = ("prompt_ids", "sampling_params", "request_id")  # LLMServerClient's keyword arguments


def is_server_generate(method: Any) -> bool:
    """Whether ``method`` is a coroutine ``generate`` of verl's rollout-server protocol."""
    try:
        fn = inspect.unwrap(method)
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return inspect.iscoroutinefunction(fn) and all(name in params for name in PROTOCOL)


class ReplicaClock:
    """Busy seconds of this process's replica: time with at least one request in ``generate``."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # the event loop updates, the metric collection reads
        self._in_flight = 0
        self._since = 0.0
        self._busy = 0.0
        self.rank: int | None = None

    def begin(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._since = self._clock()
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._busy += self._clock() - self._since

    def busy_s(self) -> float:
        """Seconds busy so far, the running interval included (monotonic)."""
        with self._lock:
            running = self._clock() - self._since if self._in_flight > 0 else 0.0
            return self._busy + running


class _Server:
    def __init__(self) -> None:
        self.clock = ReplicaClock()
        self.calls = IdleExport()
        self.registered = False


_STATE = _Server()


def _forget() -> None:
    global _STATE
    _STATE = _Server()


per_process.register(__name__, reset=_forget)


def _observe(options: CallbackOptions) -> Iterable[Observation]:
    rank = _STATE.clock.rank
    attrs = {} if rank is None else {semconv.ATTR_ROLLOUT_REPLICA: rank}
    return [Observation(_STATE.clock.busy_s(), attrs)]


@safe("rollout server request start")
def _start(instance: Any) -> bool:
    if not _STATE.registered:
        _STATE.registered = True
        if PROCESS.identity.role == semconv.ROLE_UNKNOWN:  # before the pipeline (and its resource) exists
            PROCESS.identify(role=semconv.ROLE_ROLLOUT_SERVER)
        rank = getattr(instance, "replica_rank", None)
        _STATE.clock.rank = rank if isinstance(rank, int) else None
        catalog.create_observable(PROCESS.telemetry.meter, catalog.ROLLOUT_REPLICA_BUSY_TIME, [_observe])
    # and the families an engine registered late (at most once a minute)
    engine_metrics.bridge(PROCESS.telemetry.meter, _STATE.clock.rank)
    _STATE.clock.begin()
    _STATE.calls.begin()
    return True


@safe("rollout server request end")
def _end() -> None:
    _STATE.clock.end()
    _STATE.calls.end()


@safe("rollout server request context")
def _take_context(kwargs: dict[str, Any]) -> tuple[Any, Tree | None] | None:
    """The engine's trace headers of this request, set for it (a token to reset), and the tree
    that holds the engine's spans of a held call (``engine_handback``); None: no context."""
    request_id, parent, held = engine_context.detach(kwargs.get("request_id"))
    if parent is None:
        return None
    kwargs["request_id"] = request_id  # verl and the engine see verl's own id
    if settings().engine_tracing == "false":
        return None
    tree = engine_handback.hold(parent) if held else None
    return engine_context.ENGINE_HEADERS.set({"traceparent": parent}), tree


@safe("rollout server engine hand-back")
def _give(tree: Tree, result: Any, error: BaseException | None) -> None:
    engine_handback.give(tree, result, error)


async def generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``<Server>.generate(prompt_ids, sampling_params, request_id, ...)``: one engine request."""
    started = _start(instance) is True  # None: our error (said once), then no end either
    carried = _take_context(kwargs)
    headers, tree = carried if carried is not None else (None, None)
    result, error = None, None
    try:
        result = await wrapped(*args, **kwargs)
        return result
    except BaseException as exc:
        error = exc
        raise
    finally:
        if headers is not None:
            engine_context.ENGINE_HEADERS.reset(headers)
        if tree is not None:
            _give(tree, result, error)
        if started:
            _end()
