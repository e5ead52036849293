"""Spans recorded as plain data, turned into SDK spans only when they are to be exported.

A span tree whose fate is decided when it ends (the rollout trajectories: ``hooks/rollout``)
records otel-verl's own spans of it as ``Rec`` objects: a few Python fields instead of an SDK
span with its lock, bounded attribute set and processor calls. Only a kept tree's records become
``ReadableSpan`` objects (``to_readable``), handed to the export processors as any ended span.

A tree can have members in another process (the reward worker's span and the user spans under
it): that process hands them back as wire data (``to_wire``: tuples of numbers, strings and
plain containers, what Ray pickles cheaply and safely), and the tree's own process turns them
back into spans with the other process's resource (``from_wire``, which checks every field: it
is data from another process).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

WIRE_VERSION = 1
MAX_WIRE_SPANS = 256  # spans one hand-back may carry (a reward call and the user spans under it)
MAX_WIRE_ITEMS = 128  # attributes / events / links of one span on the wire
MAX_TEXT = 65536  # characters of one string on the wire (an exception's stack trace fits)
_KINDS = tuple(SpanKind)
_CODES = tuple(StatusCode)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class Rec:
    """One span as plain data: filled while it runs, exported only if its tree is kept."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "parent_id",
        "parent_remote",
        "kind",
        "start_ns",
        "end_ns",
        "attributes",
        "events",
        "links",
        "status",
        "description",
        "scope",
    )

    def __init__(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int,
        start_ns: int,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
        links: list[Link] | None = None,
    ) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id  # 0: a root
        self.parent_remote = False
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.attributes = attributes
        self.events: list[tuple[str, int, dict[str, Any]]] | None = None
        self.links = links
        self.status = StatusCode.UNSET
        self.description: str | None = None
        self.scope: tuple[str, str | None] | None = None  # None: the scope ``to_readable`` is given

    def error(self, exc: BaseException, at_ns: int, *, event: bool = True) -> None:
        """Status ERROR with ``exc``, and its ``exception`` event as the SDK's ``record_exception`` makes it."""
        self.status = StatusCode.ERROR
        self.description = f"{type(exc).__name__}: {exc}"
        if event:
            import traceback

            module, qualname = type(exc).__module__, type(exc).__qualname__
            attrs = {
                "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
                "exception.message": str(exc),
                "exception.stacktrace": "".join(traceback.format_exception(exc)),
                "exception.escaped": "False",
            }
            self.events = [*(self.events or ()), ("exception", at_ns, attrs)]


def _flags_state(trace_state: TraceState | None) -> TraceState:
    return trace_state if trace_state is not None else TraceState()


def to_readable(
    rec: Rec, resource: Resource, scope: InstrumentationScope, trace_state: TraceState | None = None
) -> ReadableSpan:
    """``rec`` as the ended span the SDK would have made (sampled: only recorded spans are records)."""
    state = _flags_state(trace_state)
    context = SpanContext(rec.trace_id, rec.span_id, False, _SAMPLED, state)
    parent = SpanContext(rec.trace_id, rec.parent_id, rec.parent_remote, _SAMPLED, state) if rec.parent_id else None
    events = [Event(name, attrs, ts) for name, ts, attrs in rec.events] if rec.events else ()
    if rec.scope is not None:
        scope = _scope(*rec.scope)
    return ReadableSpan(
        name=rec.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=rec.attributes,
        events=events,
        links=rec.links or (),
        kind=rec.kind,
        status=Status(rec.status, rec.description) if rec.status is StatusCode.ERROR else Status(rec.status),
        start_time=rec.start_ns,
        end_time=rec.end_ns,
        instrumentation_scope=scope,
    )


# ---------------------------------------------------------------- another process's spans
def to_wire(recs: Iterable[Rec], spans: Iterable[ReadableSpan], resource: Resource) -> tuple[Any, ...]:
    """This process's records and ended SDK spans of one tree, as data for the tree's own process."""
    out = [_rec_wire(r) for r in recs]
    out += [_span_wire(s) for s in spans]
    attrs, schema_url = _resource_wire(resource)
    return (WIRE_VERSION, attrs, schema_url, out[:MAX_WIRE_SPANS])


_wire_resource: tuple[Resource, dict[str, Any], str] | None = None  # this process's, made once


def _resource_wire(resource: Resource) -> tuple[dict[str, Any], str]:
    global _wire_resource
    found = _wire_resource
    if found is None or found[0] is not resource:
        found = _wire_resource = (resource, dict(resource.attributes), resource.schema_url or "")
    return found[1], found[2]


def _rec_wire(r: Rec) -> tuple[Any, ...]:
    links = [(lk.context.trace_id, lk.context.span_id, dict(lk.attributes or {})) for lk in r.links or ()]
    return (
        r.name,
        r.trace_id,
        r.span_id,
        r.parent_id,
        r.parent_remote,
        r.kind.value,
        r.start_ns,
        r.end_ns,
        dict(r.attributes),
        [(n, ts, dict(a)) for n, ts, a in r.events or ()],
        links,
        r.status.value,
        r.description,
        r.scope,
    )


def _span_wire(s: ReadableSpan) -> tuple[Any, ...]:
    parent = s.parent
    scope = s.instrumentation_scope
    return (
        s.name,
        s.context.trace_id,
        s.context.span_id,
        parent.span_id if parent is not None else 0,
        bool(parent.is_remote) if parent is not None else False,
        s.kind.value,
        s.start_time or 0,
        s.end_time or 0,
        dict(s.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
        [(lk.context.trace_id, lk.context.span_id, dict(lk.attributes or {})) for lk in s.links],
        s.status.status_code.value,
        s.status.description,
        (scope.name, scope.version) if scope is not None else None,
    )


def from_wire(data: Any, trace_id: int) -> tuple[Resource, list[Rec]] | None:
    """The records in ``to_wire`` data, or None when it is not such data. Only spans of
    ``trace_id`` are taken; a malformed span is left out, a malformed value of one dropped."""
    if not (isinstance(data, tuple | list) and len(data) == 4 and data[0] == WIRE_VERSION):
        return None
    _, attrs, schema_url, spans = data
    if not isinstance(attrs, dict) or not isinstance(schema_url, str) or not isinstance(spans, list | tuple):
        return None
    recs = [r for r in (_rec_of(s, trace_id) for s in spans[:MAX_WIRE_SPANS]) if r is not None]
    return _resource(_attributes(attrs), schema_url[:MAX_TEXT]), recs


def _is_id(value: Any, bits: int) -> bool:
    return type(value) is int and 0 < value < (1 << bits)


def _is_time(value: Any) -> bool:
    return type(value) is int and 0 <= value < (1 << 63)


def _rec_of(item: Any, trace_id: int) -> Rec | None:
    if not isinstance(item, tuple | list) or len(item) != 14:
        return None
    name, tid, sid, pid, remote, kind, start, end, attrs, events, links, code, desc, scope = item
    if not (isinstance(name, str) and tid == trace_id and _is_id(sid, 64) and (pid == 0 or _is_id(pid, 64))):
        return None
    if not (_is_time(start) and _is_time(end) and start <= end and type(kind) is int and type(code) is int):
        return None
    if not (0 <= kind < len(_KINDS) and 0 <= code < len(_CODES) and isinstance(attrs, dict)):
        return None
    rec = Rec(name[:MAX_TEXT], tid, sid, pid, start, _attributes(attrs), _KINDS[kind])
    rec.parent_remote = remote is True
    rec.end_ns = end
    rec.status = _CODES[code]
    rec.description = desc[:MAX_TEXT] if isinstance(desc, str) else None
    if isinstance(events, list | tuple) and events:
        rec.events = [
            (e[0][:MAX_TEXT], e[1], _attributes(e[2]))
            for e in events[:MAX_WIRE_ITEMS]
            if isinstance(e, tuple | list) and len(e) == 3 and isinstance(e[0], str) and _is_time(e[1])
        ]
    if isinstance(links, list | tuple) and links:
        rec.links = [
            Link(SpanContext(lk[0], lk[1], True, _SAMPLED), _attributes(lk[2]))
            for lk in links[:MAX_WIRE_ITEMS]
            if isinstance(lk, tuple | list) and len(lk) == 3 and _is_id(lk[0], 128) and _is_id(lk[1], 64)
        ]
    if isinstance(scope, tuple | list) and len(scope) == 2 and isinstance(scope[0], str):
        rec.scope = (scope[0][:MAX_TEXT], scope[1][:MAX_TEXT] if isinstance(scope[1], str) else None)
    return rec


_SCALARS = (str, bool, int, float)


def _value(value: Any) -> Any:
    """An attribute value as OpenTelemetry allows it (a scalar or a list of one scalar type), else None."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list | tuple) and len(value) <= MAX_WIRE_ITEMS:
        kinds = {type(v) for v in value}
        if len(kinds) <= 1 and kinds <= set(_SCALARS):
            return tuple(v[:MAX_TEXT] if isinstance(v, str) else v for v in value)
    return None


def _attributes(attrs: Any) -> dict[str, Any]:
    if not isinstance(attrs, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in list(attrs.items())[:MAX_WIRE_ITEMS]:
        clean = _value(value)
        if isinstance(key, str) and clean is not None:
            out[key[:MAX_TEXT]] = clean
    return out


# the few resources and scopes a process sees, made once each (bounded: the data is another process's)
_MAX_CACHED = 64
_cache_lock = threading.Lock()
_resources: OrderedDict[tuple[Any, ...], Resource] = OrderedDict()
_scopes: OrderedDict[tuple[str, str | None], InstrumentationScope] = OrderedDict()


def _resource(attrs: dict[str, Any], schema_url: str) -> Resource:
    key = (schema_url, *sorted(attrs.items()))
    with _cache_lock:
        found = _resources.get(key)
        if found is None:
            found = _resources[key] = Resource(attrs, schema_url or None)
            while len(_resources) > _MAX_CACHED:
                _resources.popitem(last=False)
        return found


def _scope(name: str, version: str | None) -> InstrumentationScope:
    key = (name, version)
    with _cache_lock:
        found = _scopes.get(key)
        if found is None:
            found = _scopes[key] = InstrumentationScope(name, version)
            while len(_scopes) > _MAX_CACHED:
                _scopes.popitem(last=False)
        return found


def readable_all(
    recs: Sequence[Rec], resource: Resource, scope: InstrumentationScope, trace_state: TraceState | None = None
) -> list[ReadableSpan]:
    return [to_readable(r, resource, scope, trace_state) for r in recs]
