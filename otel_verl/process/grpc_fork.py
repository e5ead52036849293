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
interpreter start; it sets the switch (a value the user set is kept) only in a process of a verl
job that runs OpenTelemetry's bootstrap (:func:`verl_process`):

* a job's Ray worker (``otel_verl/_worker_site`` on ``PYTHONPATH``, which only ``hooks.ray_launch``
  puts there), or any process with the job's run id (``OTEL_VERL_RUN_ID``: the launcher's
  children, or a launcher given one);
* a launcher under ``opentelemetry-instrument`` whose command runs verl: ``python -m verl.…`` or
  ``-m recipe.…`` (verl's recipes), or a script in a ``verl`` or ``recipe`` folder.

Any other program, ``opentelemetry-instrument``'s included, starts with its environment and gRPC's
default untouched. A verl launcher started another way (a script of one's own) gets the setting
with ``OTEL_VERL_RUN_ID`` set beforehand, or sets ``GRPC_ENABLE_FORK_SUPPORT=false`` itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence

VAR = "GRPC_ENABLE_FORK_SUPPORT"
RUN_ID_VAR = "OTEL_VERL_RUN_ID"  # otel_verl.config.RUN_ID (not imported: this runs at every interpreter start)
WORKER_SITE = "_worker_site"
# the folders whose sitecustomize runs OpenTelemetry's bootstrap: opentelemetry-instrument's
# own and the Ray workers' (otel_verl/_worker_site, process.worker_bootstrap)
_BOOTSTRAP_FOLDERS = (os.path.join("instrumentation", "auto_instrumentation"), WORKER_SITE)
_VERL_PACKAGES = ("verl", "recipe")  # what a verl launcher's `-m` module or script folder starts with


def _python_path(environ: MutableMapping[str, str]) -> list[str]:
    return [p.rstrip(os.sep) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def auto_instrumented(environ: MutableMapping[str, str]) -> bool:
    """Whether this interpreter runs OpenTelemetry's bootstrap (one of its folders on ``PYTHONPATH``)."""
    return any(p.endswith(_BOOTSTRAP_FOLDERS) for p in _python_path(environ))


def _runs_verl(argv: Sequence[str]) -> bool:
    """Whether the interpreter's command line (``sys.orig_argv``) runs a verl module or script."""
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            module = arg[2:] or (args[0] if args else "")
            return module.split(".")[0] in _VERL_PACKAGES
        if arg in ("-c", "-") or arg.startswith("-c"):
            return False
        if arg in ("-W", "-X", "-Q"):  # an option with a value of its own
            args = args[1:]
            continue
        if arg.startswith("-"):
            continue
        folders = os.path.dirname(os.path.abspath(arg)).split(os.sep)
        return any(f in _VERL_PACKAGES for f in folders)
    return False


def verl_process(environ: MutableMapping[str, str], argv: Sequence[str] | None = None) -> bool:
    """Whether this interpreter is a process of a verl job that runs OpenTelemetry's bootstrap (the
    module's rules); ``argv``: the command line (default ``sys.orig_argv``)."""
    if not auto_instrumented(environ):
        return False
    if environ.get(RUN_ID_VAR) or any(os.path.basename(p) == WORKER_SITE for p in _python_path(environ)):
        return True
    return _runs_verl(getattr(sys, "orig_argv", []) if argv is None else argv)


def apply(environ: MutableMapping[str, str] = os.environ, argv: Sequence[str] | None = None) -> None:
    """Turn gRPC's fork support off in a verl job's auto-instrumented process, unless the user set it."""
    if verl_process(environ, argv):
        environ.setdefault(VAR, "false")
