"""This process's threads, where each one is, as one log record (``verl.stall.stacks``).

``sys._current_frames`` sees every Python thread, also a main thread blocked in native code or
asleep (those release the GIL); asyncio tasks waiting on the loop show as the loop's frame.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_verl import private_api, semconv
from otel_verl.package import PYTHON
from otel_verl.process.state import PROCESS

OWN_THREADS = ("otel-verl-stall",)  # our own reporter thread: not what anyone is stuck in


def format_stacks() -> str:
    # The documented way to see every thread's frame, but CPython's (an underscore name):
    # without it (said once, with the interpreter's version) there are no stacks to report.
    current_frames = private_api.attribute(
        sys, "_current_frames", name="sys._current_frames", dists=(PYTHON,), effect="no thread stacks are reported"
    )
    if current_frames is None:
        return ""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in current_frames().items():
        name = names.get(ident, "?")
        if name in OWN_THREADS:
            continue
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'Thread "{name}" (ident {ident}):\n{stack}')
    return "\n".join(parts)


def _context(state: dict[str, Any]) -> Any:
    trace_id, span_id = state.get("trace_id"), state.get("span_id")
    if not (isinstance(trace_id, str) and isinstance(span_id, str)):
        return None
    try:
        ctx = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(TraceFlags.SAMPLED))
    except ValueError:
        return None
    return trace.set_span_in_context(NonRecordingSpan(ctx))


def report(state: dict[str, Any], actor_class: str | None = None) -> bool:
    """Emit this process's stacks for the stall ``state`` describes; True when a record went out."""
    provider = PROCESS.logger_provider()
    if provider is None:
        return False
    identity = PROCESS.identity
    attrs: dict[str, Any] = {
        semconv.RES_ROLE: identity.role,
        semconv.RES_PROCESS_PID: os.getpid(),
        semconv.RES_HOST_NAME: socket.gethostname(),
        semconv.ATTR_STALL_EPISODE: int(state.get("episode", 0)),
        semconv.ATTR_STALL_SECONDS: float(state.get("stalled_s", 0.0)),
        semconv.ATTR_EVENT_NAME: semconv.EVENT_STALL_STACKS,
    }
    if identity.rank is not None:
        attrs[semconv.RES_RANK] = identity.rank
    if isinstance(state.get("step"), int):
        attrs[semconv.ATTR_STEP] = state["step"]
    if actor_class:
        attrs[semconv.ATTR_RAY_ACTOR_CLASS] = actor_class
    provider.get_logger(semconv.SCOPE).emit(
        event_name=semconv.EVENT_STALL_STACKS,
        body=format_stacks(),
        severity_number=SeverityNumber.WARN,
        severity_text="WARNING",
        attributes=attrs,
        context=_context(state),
    )
    fn = getattr(provider, "force_flush", None)
    if fn is not None:  # the job may be killed any moment now: get it out
        from otel_verl.process.telemetry import run_bounded  # the SDK: loaded by now (a pipeline exists)

        run_bounded(fn, 5.0)
    return True
