"""The series identity (run, project, experiment, process role, rank, host) on every exported metric point.

The dashboards and alert rules select and group by ``verl_run_id``, ``verl_experiment``, ... Those
are resource attributes, and a backend makes labels of resource attributes only when told to:
Prometheus 3 with its default OTLP settings keeps them in ``target_info`` alone, and so do Mimir
and Grafana Cloud unless configured; Datadog tags a few. Point attributes become labels (tags)
everywhere. So the step metric reader hands its exporters each batch with the resource's
``semconv.RES_SERIES_IDENTITY`` attributes copied onto every data point of that resource: every
push exporter (OTLP, the JSON files, the spool) sends the same points, whatever instrument made
them (otel-verl's, the GPU readings, the bridged engine metrics, a user's through the global
provider). A point's own attribute of the same name is kept (a user's point with its own ``verl.rank``).

The copies change no series: they are constant for a process, whose series differ already by its
``service.instance.id``. Where a backend also promotes those resource attributes (the kit's
``prometheus.yml``), Prometheus keeps the point's label and adds the promoted one only where the
point has none: one label each, the same value (docs/prometheus.md). The offline readers drop the
copies again (``offline.otlp_files``): there they are the resource's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics

from otel_verl import semconv


def identity_of(resource_attributes: Any) -> dict[str, Any]:
    """The series identity attributes a resource has."""
    return {k: resource_attributes[k] for k in semconv.RES_SERIES_IDENTITY if k in resource_attributes}


def stamped(batch: MetricsData) -> MetricsData:
    """``batch`` with each resource's identity attributes on every one of its data points."""
    return _copy(batch, "resource_metrics", [_resource(rm) for rm in batch.resource_metrics])


def _resource(rm: ResourceMetrics) -> ResourceMetrics:
    identity = identity_of(rm.resource.attributes)
    if not identity:
        return rm
    bare = dict(identity)  # the attributes of every point without its own (shared: points are read only)
    scopes = [
        _copy(sm, "metrics", [_copy(m, "data", _data(m.data, identity, bare)) for m in sm.metrics])
        for sm in rm.scope_metrics
    ]
    return _copy(rm, "scope_metrics", scopes)


def _data(data: Any, identity: dict[str, Any], bare: dict[str, Any]) -> Any:
    points = [_copy(p, "attributes", {**identity, **p.attributes} if p.attributes else bare) for p in data.data_points]
    return _copy(data, "data_points", points)


def _copy(obj: Any, field: str, value: Any) -> Any:
    """``obj`` (one of the SDK's frozen dataclasses) with ``field`` set to ``value``: a shallow copy, as
    ``copy.copy`` makes it. ``dataclasses.replace`` would run the class's ``__init__`` over every field
    again, for every point of every step; an object without a ``__dict__`` (slots) still gets that."""
    state = getattr(obj, "__dict__", None)
    if state is None:
        return replace(obj, **{field: value})
    new = _new(type(obj))
    attrs = new.__dict__
    attrs.update(state)
    attrs[field] = value
    return new


_new = object.__new__


_POINT_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


def stamp_json(request: Any) -> bool:
    """An OTLP/JSON metrics request (``{"resourceMetrics": [...]}``, as the files hold it) with each
    resource's identity attributes added to every data point that lacks them, in place (the files
    are written without the copies; ``otel-verl replay`` adds them for the backend). True if any
    point changed."""
    changed = False
    for rm in request.get("resourceMetrics") or ():
        attrs = (rm.get("resource") or {}).get("attributes") or ()
        identity = [a for a in attrs if isinstance(a, dict) and a.get("key") in semconv.RES_SERIES_IDENTITY]
        if not identity:
            continue
        for sm in rm.get("scopeMetrics") or ():
            for metric in sm.get("metrics") or ():
                for kind in _POINT_KINDS:
                    for point in (metric.get(kind) or {}).get("dataPoints") or ():
                        own = point.setdefault("attributes", [])
                        have = {a.get("key") for a in own if isinstance(a, dict)}
                        extra = [a for a in identity if a["key"] not in have]
                        if extra:
                            own.extend(extra)
                            changed = True
    return changed
