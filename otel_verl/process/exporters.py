"""Exporters from the standard ``OTEL_*`` environment, as the SDK's own set-up resolves them.

``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` / ``OTEL_LOGS_EXPORTER`` (default ``otlp``, as
with ``opentelemetry-distro``; ``otlp`` becomes gRPC or HTTP by ``OTEL_EXPORTER_OTLP_PROTOCOL``),
looked up through the SDK's exporter entry points. ``otlp_json_file`` writes one JSON-lines file
per signal and process into ``OTEL_VERL_FILE_DIR``, created at its first line (``LazyFile``: a
process that exports no spans leaves no empty traces file), mode 0600 in a folder made 0700, never
through a link or other file planted at its predictable name (``open_own_file``). ``prometheus`` is a pull reader on
``OTEL_EXPORTER_PROMETHEUS_HOST:PORT`` (default ``127.0.0.1:9464``, loopback only) whose series
carry the run's resource attributes as labels; each process of a host takes the next free port
(at most ``PROMETHEUS_PORTS``), so scrape that range. A port setting that is not a whole number
from 1 to 65535 is one warning and the default port (``prometheus_port``): the other signals of
the process are not affected. An OTLP exporter sends the headers of
``OTEL_VERL_OTLP_HEADERS_FILE`` (``otlp_headers``) and keeps what its endpoint does not take in
the on-disk spool until it does (``spool_export``; ``OTEL_VERL_SPOOL=off``: as the SDK alone).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
from collections.abc import Mapping
from typing import IO, Any

from otel_verl import private_api, semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings
from otel_verl.process import otlp_headers
from otel_verl.process.resource import Identity
from otel_verl.spool import exporters as spool_export

_log = logging.getLogger(__name__)

SIGNALS = ("traces", "metrics", "logs")
JSON_FILE_EXPORTER = "otlp_json_file"
PROMETHEUS_EXPORTER = "prometheus"
PROMETHEUS_PORTS = 32  # consecutive ports the pull readers of one host may take
PROMETHEUS_DEFAULT_HOST = "127.0.0.1"  # OTEL_EXPORTER_PROMETHEUS_HOST unset: loopback only
PROMETHEUS_PORT = "OTEL_EXPORTER_PROMETHEUS_PORT"
PROMETHEUS_DEFAULT_PORT = 9464  # the SDK's and opentelemetry-exporter-prometheus's default
# Resource attributes the pull reader copies onto every series (as the push exporters' points carry them).
PROMOTED_RESOURCE_ATTRIBUTES = semconv.RES_SERIES_IDENTITY


def exporter_classes(signal: str) -> dict[str, type]:
    """Exporter classes named by ``OTEL_<SIGNAL>_EXPORTER`` (default ``otlp``, as the distro does)."""
    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER")
    raw = "otlp" if raw is None else raw
    if raw.strip().lower() in ("", "none"):
        return {}
    # The SDK's own resolution (private helpers, stable since 1.2x): the same names and entry
    # points as ``opentelemetry-instrument`` itself, instead of a copy of its rules. Without them
    # (said once, with the SDK's version) this signal has no exporter: telemetry off, training on.
    resolve = [
        private_api.import_attribute(
            "opentelemetry.sdk._configuration",
            name,
            dists=("opentelemetry-sdk",),
            effect=f"no {signal} are exported from this process",
        )
        for name in ("_get_exporter_entry_point", "_import_exporters")
    ]
    _get_exporter_entry_point, _import_exporters = resolve
    if _get_exporter_entry_point is None or _import_exporters is None:
        return {}
    names = [_get_exporter_entry_point(n.strip(), signal) for n in raw.split(",") if n.strip()]  # type: ignore[arg-type]
    found = _import_exporters(*[names if signal == sig else [] for sig in SIGNALS])
    return found[SIGNALS.index(signal)]


FILE_MODE = 0o600  # telemetry holds the run's config, hosts, errors: the user's own
DIR_MODE = 0o700  # OTEL_VERL_FILE_DIR when otel-verl creates it


def file_path(signal: str, identity: Identity, prefix: str = "") -> str:
    """``<prefix><signal>-<role>-<pid>.jsonl`` in ``OTEL_VERL_FILE_DIR``, the folder made if needed."""
    folder = settings().file_dir
    os.makedirs(folder, mode=DIR_MODE, exist_ok=True)  # the mode of a folder made here; umask untouched
    return os.path.join(folder, f"{prefix}{signal}-{identity.label}-{os.getpid()}.jsonl")


_CREATE = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_REOPEN = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_own_file(path: str) -> IO[str] | None:
    """``path`` opened to append, created ``FILE_MODE`` by this call, else one of this user's that is
    already there (a reused pid's: the earlier process's lines stay); None, after one warning, when
    what is there is not: a symlink (never followed), not a regular file, another user's, or
    hard-linked elsewhere. Other errors (a full disk, no permission) raise as ``open`` would."""
    try:
        fd = os.open(path, _CREATE, FILE_MODE)
    except FileExistsError:
        fd = None
    if fd is None:
        try:
            fd = os.open(path, _REOPEN)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # ELOOP: a symlink, O_NOFOLLOW
                raise
            why = "is a symbolic link or not a regular file"
        else:
            info = os.fstat(fd)
            why = (
                "is not a regular file"
                if not stat.S_ISREG(info.st_mode)
                else "belongs to another user"
                if info.st_uid != os.geteuid()
                else "has other hard links"
                if info.st_nlink != 1
                else ""
            )
            if why:
                os.close(fd)
        if why:
            warn_once(
                f"json file {path}",
                "%s %s, so this process writes no telemetry to it (it was not created by otel-verl for this process)",
                path,
                why,
            )
            return None
    return os.fdopen(fd, "a", encoding="utf-8")


class LazyFile:
    """The stream of a JSON-lines file exporter: the file is opened (to append) at the first write,
    as ``open_own_file`` does; a file it refuses takes no lines (dropped, said once).

    The exporter writes whole lines and flushes after each export, so nothing waits in here; it
    does not close a stream it was given, so the file closes with the process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._refused = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._file is not None and self._file.closed

    def write(self, text: str) -> int:
        with self._lock:
            if self._refused:
                return len(text)
            if self._file is None:
                self._file = open_own_file(self.path)
                if self._file is None:
                    self._refused = True
                    return len(text)
            return self._file.write(text)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()


def make_exporter(name: str, cls: type, signal: str, identity: Identity) -> Any:
    """The exporter ``name`` of ``signal``; an OTLP one behind the on-disk spool (``spool_export``)."""
    if name == JSON_FILE_EXPORTER:
        return cls(stream=LazyFile(file_path(signal, identity)))  # writes every batch: nothing to spool
    if otlp_headers.applies(cls):
        otlp_headers.hide_header_values()  # the SDK's parse of OTEL_EXPORTER_OTLP_*HEADERS quotes them
    headers = otlp_headers.headers_for(signal) if otlp_headers.applies(cls) else None
    # OTEL_VERL_OTLP_HEADERS_FILE (None: not set)
    return spool_export.wrap(cls() if headers is None else cls(headers=headers), signal)


def prometheus_port(environ: Mapping[str, str] | None = None) -> tuple[int, str | None]:
    """The first port of the pull readers, and None; or the default port and why
    ``OTEL_EXPORTER_PROMETHEUS_PORT`` was not used (not a whole number from 1 to 65535)."""
    env = os.environ if environ is None else environ
    raw = env.get(PROMETHEUS_PORT, "").strip()
    if not raw:
        return PROMETHEUS_DEFAULT_PORT, None
    if re.fullmatch(r"[0-9]{1,5}", raw) and 1 <= int(raw) <= 65535:
        return int(raw), None
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    return PROMETHEUS_DEFAULT_PORT, (
        f"{PROMETHEUS_PORT}={shown!r} is not a port from 1 to 65535; using {PROMETHEUS_DEFAULT_PORT}"
    )


def prometheus_ports(first: int) -> range:
    """The ports the pull readers of one host take, from ``first``."""
    return range(first, min(first + PROMETHEUS_PORTS, 65536))


def _with_produced_points(cls: type) -> type:
    """The pull reader ``cls``, its collections with the producers' points (the rollout engine's
    histograms: ``step_reader.add_producer``)."""
    from otel_verl.process.step_reader import with_produced_points

    class Reader(cls):  # type: ignore[misc,valid-type]
        def _receive_metrics(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> None:
            super()._receive_metrics(with_produced_points(metrics_data), timeout_millis, **kwargs)

    return Reader


def prometheus_reader() -> Any:
    """The Prometheus pull reader on the first free port from ``OTEL_EXPORTER_PROMETHEUS_PORT``, or None.

    A bad port setting is one warning and the default port; nothing here raises into the pipeline.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    first, problem = prometheus_port()
    if problem:
        warn_once("prometheus-port-setting", "Prometheus exporter: %s", problem)
    # Loopback unless asked: nothing otel-verl opens listens beyond this host by default.
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or PROMETHEUS_DEFAULT_HOST
    registry = CollectorRegistry(auto_describe=True)  # one per process: the pull reader owns it
    ports = prometheus_ports(first)
    for port in ports:
        try:
            start_http_server(port=port, addr=host, registry=registry)
        except OSError:  # another verl process on this host has this port: take the next one
            continue
        _log.debug("Prometheus exporter on %s:%s", host, port)
        return _with_produced_points(PrometheusMetricReader)(
            resource_attribute_filter=PROMOTED_RESOURCE_ATTRIBUTES.__contains__, registry=registry
        )
    warn_once(
        "prometheus-port",
        "Prometheus exporter: ports %s-%s on %s are all taken; no pull metrics from this process",
        ports[0],
        ports[-1],
        host,
    )
    return None
