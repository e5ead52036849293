"""gRPC's fork handlers off in a verl job's processes, set before gRPC is first imported.

grpcio runs fork handlers by default: in the child of every ``fork()`` they restart gRPC's own
threads. Ray starts its daemons (GCS server, raylet, dashboard, ...) with
``subprocess.Popen(..., preexec_fn=...)``, a plain ``fork()`` then ``exec``. When the OTLP/gRPC
exporter of the process that forks has a call in flight (a slow or hung Collector), that child
sometimes crashes in gRPC's code before it reaches ``exec``; the crash closes the pipe Popen waits
on, so Popen returns as if the daemon had started, and ``ray.init`` then waits for a GCS server
that is not there (``Timed out waiting for file .../gcs_server_port_...``). Every Python process
of a verl job that forks is at risk the same way: the launcher, where ``ray.init`` runs, most.

gRPC's fork support is for children that go on using gRPC without ``exec``, which verl's
processes do not need. Its switch, ``GRPC_ENABLE_FORK_SUPPORT``, is read when gRPC is first
imported; under ``opentelemetry-instrument`` with ``opentelemetry-distro`` that happens in the
distro's configurator, before any instrumentor runs. So ``otel_verl.pth`` calls :func:`apply` at
interpreter start, in processes that run OpenTelemetry's bootstrap (the launcher's or the workers'
``sitecustomize`` on ``PYTHONPATH``); the daemons and workers inherit the setting. A value the user
set is kept.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

VAR = "GRPC_ENABLE_FORK_SUPPORT"
# the folders whose sitecustomize runs OpenTelemetry's bootstrap: opentelemetry-instrument's
# own and the Ray workers' (otel_verl/_worker_site, process.worker_bootstrap)
_BOOTSTRAP_FOLDERS = (os.path.join("instrumentation", "auto_instrumentation"), "_worker_site")


def auto_instrumented(environ: MutableMapping[str, str]) -> bool:
    """Whether this interpreter runs OpenTelemetry's bootstrap (one of its folders on ``PYTHONPATH``)."""
    return any(p.rstrip(os.sep).endswith(_BOOTSTRAP_FOLDERS) for p in environ.get("PYTHONPATH", "").split(os.pathsep))


def apply(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn gRPC's fork support off in an auto-instrumented process, unless the user set it."""
    if auto_instrumented(environ):
        environ.setdefault(VAR, "false")
