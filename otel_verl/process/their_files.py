"""The run folder, not the console, for the JSON-file exporters of global providers otel-verl did not build.

With ``OTEL_*_EXPORTER=otlp_json_file`` under ``opentelemetry-instrument``, ``opentelemetry-distro``'s
configurator builds the global SDK providers of every process (the launcher's: system metrics,
auto-instrumented libraries' spans) with the upstream JSON-file exporters given no path or stream:
they write each batch to ``sys.stdout``, the user's console. ``redirect`` points each such exporter
at a file of its own for its signal in ``OTEL_VERL_FILE_DIR``, beside the run's files:
``distro-<signal>-launcher-<pid>.jsonl`` (``semconv.DISTRO_FILE_PREFIX``). These providers were built
before otel-verl set the run's identity, so their data carries none: ``otel-verl replay`` sends these
files with the run's, ``report`` and ``summary`` (the run's own account) leave them out. Exporters
given a path or a stream, other exporters (OTLP, ``console``) and providers given to
``instrument()`` are left alone.

What it reads (the SDK's processors and readers, the exporter's stream) are private names
(``private_api``): without one (said once) that exporter keeps writing to the console.
"""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry import _logs, metrics, trace

from otel_verl import private_api, semconv
from otel_verl._safe import safe
from otel_verl.process import exporters
from otel_verl.process.resource import Identity

_SDK = ("opentelemetry-sdk",)
_FILE = ("opentelemetry-exporter-otlp-json-file",)
_FILE_MODULE = "opentelemetry.exporter.otlp.json.file"
_EFFECT = "its JSON-file exporter keeps writing to the console"


def _sdk_private(obj: Any, path: str, owner: str, whose: str, **default: Any) -> Any:
    """``obj``'s private ``path`` (``owner``: the SDK class that has it), through ``private_api``:
    said once, naming ``whose`` JSON-file exporter stays on the console, when it is gone."""
    return private_api.attribute(obj, path, name=f"{owner}.{path}", dists=_SDK, effect=f"{whose}: {_EFFECT}", **default)


def _span_exporters(provider: Any) -> list[Any]:
    from opentelemetry.sdk.trace import TracerProvider

    if not isinstance(provider, TracerProvider):
        return []
    processors = _sdk_private(
        provider,
        "_active_span_processor._span_processors",
        "opentelemetry.sdk.trace.TracerProvider",
        "the global tracer provider",
        default=(),
    )
    return [getattr(p, "span_exporter", None) for p in processors]  # public on the SDK's span processors


def _metric_exporters(provider: Any) -> list[Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if not isinstance(provider, MeterProvider):
        return []
    whose = "the global meter provider"
    readers = _sdk_private(provider, "_metric_readers", "opentelemetry.sdk.metrics.MeterProvider", whose, default=())
    owner = "opentelemetry.sdk.metrics.export.PeriodicExportingMetricReader"
    periodic = [r for r in readers if isinstance(r, PeriodicExportingMetricReader)]
    return [_sdk_private(r, "_exporter", owner, whose) for r in periodic]


def _log_exporters(provider: Any) -> list[Any]:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor

    if not isinstance(provider, LoggerProvider):
        return []
    processors = _sdk_private(
        provider,
        "_multi_log_record_processor._log_record_processors",
        "opentelemetry.sdk._logs.LoggerProvider",
        "the global logger provider",
        default=(),
    )
    found = []
    for p in processors:
        path = (
            "_batch_processor._exporter"
            if isinstance(p, BatchLogRecordProcessor)
            else "_exporter"
            if isinstance(p, SimpleLogRecordProcessor)
            else None
        )
        if path is not None:
            found.append(_sdk_private(p, path, f"opentelemetry.sdk._logs.export.{type(p).__name__}", "a log processor"))
    return found


def _to_file(exporter: Any, signal: str, identity: Identity) -> bool:
    """Point ``exporter``, when it is an upstream JSON-file exporter writing to the console, at
    this process's file for ``signal``; True when it did."""
    if exporter is None or not type(exporter).__module__.startswith(_FILE_MODULE):
        return False
    effect = f"the {signal} {_EFFECT}"
    inner = private_api.attribute(
        exporter, "_exporter", name=f"{_FILE_MODULE} exporters' _exporter", dists=_FILE, effect=effect
    )
    if inner is None:
        return False

    def private(name: str) -> Any:
        return private_api.attribute(
            inner, name, name=f"{_FILE_MODULE}._internal._FileExporter.{name}", dists=_FILE, effect=effect
        )

    lock = private("_lock")
    if lock is None or private("_owns_stream") is not False:  # a file of its own: the path the user gave
        return False
    with lock:  # its export writes under this lock: no batch is split between the console and the file
        stream = private("_stream")
        if stream is not sys.stdout and stream is not sys.__stdout__:  # a stream the user gave: theirs
            return False
        # the one write: the exporter's next export, under this lock, goes to the file
        inner._stream = exporters.LazyFile(exporters.file_path(signal, identity, semconv.DISTRO_FILE_PREFIX))
    return True


@safe("JSON-file exporters of the global providers")
def redirect(starts_run: bool) -> list[str]:
    """Point the console-writing JSON-file exporters of the global SDK providers at this process's
    ``distro-*`` files in ``OTEL_VERL_FILE_DIR``; ``starts_run``: this process is the launcher (named so in the
    file names), else the files say ``unknown`` (the role is not known before verl's code runs).
    Returns the signals redirected."""
    identity = Identity(role=semconv.ROLE_LAUNCHER if starts_run else semconv.ROLE_UNKNOWN)
    done = []
    for signal, provider, found in (
        ("traces", trace.get_tracer_provider(), _span_exporters),
        ("metrics", metrics.get_meter_provider(), _metric_exporters),
        ("logs", _logs.get_logger_provider(), _log_exporters),
    ):
        if type(provider).__module__.startswith("opentelemetry.sdk") and [
            e for e in found(provider) if _to_file(e, signal, identity)
        ]:
            done.append(signal)
    return done
