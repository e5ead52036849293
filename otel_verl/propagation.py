"""Trace context across Ray: carried inside the data verl already sends to its workers.

Ray does not carry OpenTelemetry context across an actor call. verl's worker-group calls
pass one data object per call (a ``TensorDict`` on the v0 driver, a TransferQueue
``KVBatchMeta``/``BatchMeta`` on v1, a ``DataProto`` elsewhere); the W3C ``traceparent`` rides in it
under ``CARRIER_KEY`` as a non-tensor entry / ``extra_info`` / ``meta_info`` item, the same
places verl puts its own per-call options (the training step rides along as W3C baggage, for
user code: ``otel_verl.step_context``). The driver removes it again right after the
call and the worker takes it out before verl's code sees the data, so verl never
observes the key; a call without a carrier works exactly as before.

v1 rollouts link to the ``gen`` stage span of the step that dispatched them, but verl dispatches
them (``prepare_step``) before that stage starts: ``promise_span_id`` fixes the id the next span of
a given name in a trace will get, so the link can travel with the dispatch.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from opentelemetry import baggage
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_verl import patches, private_api

CARRIER_KEY = "_otel_verl_traceparent"
# in a carrier: the receiver hands its spans back instead of exporting them (their tree is decided later)
DEFER_KEY = "otel_verl_defer"
# W3C trace context + baggage (the step for user code, ``step_context``), whatever
# OTEL_PROPAGATORS says: the carrier never leaves verl's own processes.
_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_TRACE_CONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()
_BAGGAGE_HEADER = "baggage"
# The baggage (the step) is the same for every call of a step, the trace context is not: its
# header is encoded, and parsed, once per distinct value (a few per step; bounded, cleared when full).
_MAX_MEMO = 64
_MAX_MEMO_HEADER = 8192  # characters: what the SDK's baggage propagator reads at most
_baggage_out: dict[tuple[Any, ...], str] = {}
_baggage_in: dict[str, Context] = {}


def _inject(carrier: dict[str, str], context: Context | None) -> None:
    """``_PROPAGATOR.inject``, with the baggage header made once per distinct baggage."""
    _TRACE_CONTEXT.inject(carrier, context=context)
    entries = baggage.get_all(context)
    if not entries:
        return
    try:
        key = tuple(entries.items())
        header = _baggage_out.get(key)
    except TypeError:  # an unhashable value: encoded as the SDK does, each time
        _BAGGAGE.inject(carrier, context=context)
        return
    if header is None:
        made: dict[str, str] = {}
        _BAGGAGE.inject(made, context=context)
        header = made.get(_BAGGAGE_HEADER, "")
        if len(_baggage_out) >= _MAX_MEMO:
            _baggage_out.clear()
        _baggage_out[key] = header
    if header:
        carrier[_BAGGAGE_HEADER] = header


def _extract(carrier: dict[str, Any]) -> Context:
    """``_PROPAGATOR.extract(carrier)``, with a baggage header parsed once per distinct value."""
    header = carrier.get(_BAGGAGE_HEADER)
    if not isinstance(header, str) or len(header) > _MAX_MEMO_HEADER:  # the memo holds no large strings
        return _PROPAGATOR.extract(carrier)
    found = _baggage_in.get(header)
    if found is None:
        # Contexts are immutable: one parsed baggage serves every carrier that has this header
        found = _BAGGAGE.extract({_BAGGAGE_HEADER: header}, Context())
        if len(_baggage_in) >= _MAX_MEMO:
            _baggage_in.clear()
        _baggage_in[header] = found
    # the same context as trace context then baggage into an empty one: the keys do not overlap
    return _TRACE_CONTEXT.extract(carrier, found)


def _kind(data: Any) -> str | None:
    name = type(data).__name__
    if name == "TensorDict":
        return "td"
    # v1: the driver passes a KVBatchMeta; verl's dispatch hands each rank a BatchMeta chunk
    if name in ("KVBatchMeta", "BatchMeta") and isinstance(getattr(data, "extra_info", None), dict):
        return "kv"
    if name == "DataProto" and isinstance(getattr(data, "meta_info", None), dict):
        return "dp"
    return None


def find_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The data object of a worker call: ``data=`` or the first positional argument."""
    data = kwargs.get("data", args[0] if args else None)
    return data if _kind(data) else None


def carrier_value(context: Context | None = None, defer: bool = False) -> str | None:
    """``context`` (default: the current one) as a carrier value, or None (nothing to carry);
    ``defer``: marked for the receiver to hand its spans back (``hooks/rollout/reward_worker``)."""
    carrier: dict[str, str] = {}
    _inject(carrier, context)
    if carrier and defer:
        carrier[DEFER_KEY] = "1"
    return json.dumps(carrier) if carrier else None


def inject(data: Any, context: Context | None = None) -> bool:
    """Put ``context`` (default: the current one) into ``data``; returns whether it did."""
    value = carrier_value(context)
    if value is None:
        return False
    kind = _kind(data)
    if kind == "td":
        # what verl's ``tu.assign_non_tensor_data`` stores (a ``NonTensorData``), at a third of its cost
        data.set_non_tensor(CARRIER_KEY, value)
    elif kind == "kv":
        data.extra_info[CARRIER_KEY] = value
    elif kind == "dp":
        data.meta_info[CARRIER_KEY] = value
    else:
        return False
    return True


def take(data: Any) -> Context | None:
    """Remove the carrier from ``data`` and return the context it held, if any."""
    kind = _kind(data)
    value: Any = None
    if kind == "td":
        if CARRIER_KEY in data.keys():
            value = data.get_non_tensor(CARRIER_KEY)  # each rank's chunk of it holds the same string
            data.del_(CARRIER_KEY)
    elif kind == "kv":
        value = data.extra_info.pop(CARRIER_KEY, None)
    elif kind == "dp":
        value = data.meta_info.pop(CARRIER_KEY, None)
    return extract(value)


def take_from_batch(data: Any) -> Context | None:
    """Remove a carrier from a ``DataProto``'s ``non_tensor_batch`` (where verl copies per-sample
    kwargs, one array entry per row) and return its context, if any."""
    return take_from_batch_deferred(data)[0]


def take_from_batch_deferred(data: Any) -> tuple[Context | None, bool]:
    """``take_from_batch``, and whether the carrier was marked deferred."""
    batch = getattr(data, "non_tensor_batch", None)
    if not isinstance(batch, dict) or CARRIER_KEY not in batch:
        return None, False
    values = batch.pop(CARRIER_KEY)
    carrier = _carrier(values[0] if len(values) else None)
    if carrier is None:
        return None, False
    return _extract(carrier), carrier.get(DEFER_KEY) == "1"


def is_deferred(value: Any) -> bool:
    """Whether a carrier value is marked deferred (``carrier_value(defer=True)``)."""
    carrier = _carrier(value)
    return carrier is not None and carrier.get(DEFER_KEY) == "1"


def _carrier(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        carrier = json.loads(value)
    except ValueError:
        return None
    return carrier if isinstance(carrier, dict) else None


def extract(value: Any) -> Context | None:
    """The context in a carrier value as ``inject`` wrote it (a JSON string), else None."""
    carrier = _carrier(value)
    return _extract(carrier) if carrier is not None else None


# ---------------------------------------------------------------- span ids promised before the span starts
_MAX_PROMISES = 16  # (trace, name) entries kept per tracer: a promise whose span never starts ages out


class _Promises:
    """Shared state of the sampler / id-generator shims on one SDK tracer.

    The SDK's ``Tracer.start_span`` asks the sampler (which sees the new span's trace id and
    name) and then, in the same call and thread, the id generator for the span id: the sampler
    shim notes a watched (trace id, name), the id-generator shim hands that span its promised id.
    """

    def __init__(self, ids: IdGenerator) -> None:
        self.ids = ids
        self.lock = threading.Lock()
        self.names: set[str] = set()
        self.promised: OrderedDict[tuple[int, str], int] = OrderedDict()
        self.started: OrderedDict[tuple[int, str], int] = OrderedDict()  # first span of a name per trace
        self.local = threading.local()

    @staticmethod
    def _put(table: OrderedDict[tuple[int, str], int], key: tuple[int, str], span_id: int) -> None:
        table[key] = span_id
        while len(table) > _MAX_PROMISES:
            table.popitem(last=False)

    def promise(self, trace_id: int, name: str) -> int:
        key = (trace_id, name)
        with self.lock:
            self.names.add(name)
            span_id = self.started.get(key) or self.promised.get(key)
            if span_id is None:
                span_id = self.ids.generate_span_id()
                self._put(self.promised, key, span_id)
            return span_id

    def span_id(self) -> int:
        key = getattr(self.local, "pending", None)
        if key is None:
            return self.ids.generate_span_id()
        self.local.pending = None
        with self.lock:
            span_id = self.promised.pop(key, None)
            if span_id is None:
                span_id = self.ids.generate_span_id()
            if key not in self.started:
                self._put(self.started, key, span_id)
        return span_id


class _PromiseSampler(Sampler):
    def __init__(self, inner: Sampler, promises: _Promises) -> None:
        self.inner = inner
        self.promises = promises

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any) -> Any:
        promises = self.promises
        promises.local.pending = (trace_id, name) if name in promises.names else None
        return self.inner.should_sample(parent_context, trace_id, name, *args, **kwargs)

    def get_description(self) -> str:
        return self.inner.get_description()


class _PromiseIds(IdGenerator):
    def __init__(self, inner: IdGenerator, promises: _Promises) -> None:
        self.inner = inner
        self.promises = promises

    def generate_span_id(self) -> int:
        return self.promises.span_id()

    def generate_trace_id(self) -> int:
        return self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return bool(getattr(self.inner, "is_trace_id_random", lambda: False)())


_install_lock = threading.Lock()
_SDK = ("opentelemetry-sdk",)
_NO_PROMISES = "v1 rollout trajectories are not linked to their step's gen span"


def _promises(tracer: Any) -> _Promises | None:
    if not isinstance(tracer, SdkTracer):
        return None  # not the SDK's tracer (no-op, proxy or another SDK): nothing to promise
    with _install_lock:
        # The SDK tracer's ``sampler`` and ``id_generator`` are attributes of its own, no API:
        # without them (said once, with the SDK's version) nothing is promised and no span changes.
        found = [
            private_api.attribute(
                tracer, attr, name=f"opentelemetry.sdk.trace.Tracer.{attr}", dists=_SDK, effect=_NO_PROMISES
            )
            for attr in ("sampler", "id_generator")
        ]
        sampler, ids = found
        if isinstance(sampler, _PromiseSampler):
            return sampler.promises
        if not isinstance(sampler, Sampler) or not isinstance(ids, IdGenerator):
            if sampler is not None and ids is not None:
                private_api.missing(
                    "a Sampler and an IdGenerator on opentelemetry.sdk.trace.Tracer", _SDK, _NO_PROMISES
                )
            return None
        promises = _Promises(ids)
        # undone by uninstrument(): the tracer gets its own sampler and id generator back
        patches.replace(tracer, "id_generator", _PromiseIds(ids, promises))
        patches.replace(tracer, "sampler", _PromiseSampler(sampler, promises))
        return promises


def promise_span_id(tracer: Any, trace_id: int, name: str) -> int | None:
    """The span id the first span called ``name`` in trace ``trace_id`` of ``tracer`` gets (or got,
    if it started already). None when ``tracer`` is not an OpenTelemetry SDK tracer."""
    promises = _promises(tracer)
    return promises.promise(trace_id, name) if promises is not None else None
