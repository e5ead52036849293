"""``verl.replicas.*`` spans: the trainer pausing, sleeping, waking, syncing and resuming the
rollout replicas (``CheckpointEngineManager``, in the TaskRunner).

verl drives every rollout replica through its checkpoint manager: v1 ``colocate_async`` aborts
and sleeps them at the end of each sample (inside ``gen``), then syncs the new weights and resumes
generation (inside ``update_weights``); the sync drivers sleep them before training and sync
weights into them after. Without these spans that time had no child in its stage (a
``colocate_async`` step was 0.6-0.76 explained). The weight sync itself
(``verl.replicas.update_weights``, with ``verl.step``) is the call behind the
``update_weights`` stage: users ask where weight-sync time goes (verl #4896).

Each span is a child of the current stage, with ``verl.replicas.count``. The methods are
``auto_await(async def ...)``, and ``auto_await`` decides from its caller's frame whether to
hand back a coroutine: a wrapper in between would change that answer (and break verl's own
``await self.abort_replicas()``), so the hook replaces each with ``auto_await`` around a traced
copy of the inner coroutine function (``verl_async.around_auto_await``), like
``AgentLoopManager.generate_sequences``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.spans import end_span, start_span
from otel_verl.hooks.verl_async import around_auto_await
from otel_verl.process.state import PROCESS

# CheckpointEngineManager method -> span name suffix
OPERATIONS = {
    "sleep_replicas": "sleep",
    "wake_up_replicas": "wake_up",
    "abort_replicas": "abort",
    "resume_generation_replicas": "resume_generation",
    "release_kv_cache_replicas": "release_kv_cache",
    "resume_kv_cache_replicas": "resume_kv_cache",
    "update_weights": "update_weights",
}


@safe("replica control span start")
def _start(name: str, manager: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Span | None:
    if PROCESS.trainer is None:
        return None
    attrs: dict[str, Any] = {}
    replicas = getattr(manager, "replicas", None)
    if isinstance(replicas, list):
        attrs[semconv.ATTR_REPLICAS_COUNT] = len(replicas)
    step = kwargs.get("global_steps", args[0] if args else None)
    if name.endswith(".update_weights") and isinstance(step, int):
        attrs[semconv.ATTR_STEP] = step
    return start_span(name, attributes=attrs)  # a child of the stage; current only inside run()


@safe("replica control span: current")
def _enter(span: Span) -> object:
    return otel_context.attach(trace.set_span_in_context(span))


@safe("replica control span end")
def _end(span: Span, token: object, error: BaseException | None) -> None:
    if token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]
    end_span(span, error)


def traced(method: str) -> Callable[[Any], Any]:
    """The ``Hook.replace`` factory for ``CheckpointEngineManager.<method>``: None (the hook says so
    once and stays off) when it is no longer ``auto_await(async def ...)``."""
    name = semconv.SPAN_REPLICAS_PREFIX + OPERATIONS[method]

    def build(inner: Any) -> Any:
        @functools.wraps(inner)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            span = _start(name, self, args, kwargs)  # now: in the caller's thread, under its stage
            coro = inner(self, *args, **kwargs)
            if span is None:
                return coro

            async def run() -> Any:
                # Current only in the coroutine's own context: asyncio.run (a sync caller) runs it in
                # a copy of the caller's, where the caller could not detach it again.
                token = _enter(span)
                try:
                    result = await coro
                except BaseException as exc:
                    _end(span, token, exc)
                    raise
                _end(span, token, None)
                return result

            return run()

        return call

    def replace(original: Any) -> Any:
        return around_auto_await(original, build)

    return replace


HOOKS = [
    Hook(targets.CHECKPOINT_ENGINE, f"CheckpointEngineManager.{method}", traced(method), replace=True)
    for method in OPERATIONS
]
