"""gRPC's fork handlers are off in every process that runs OpenTelemetry's bootstrap
(``process.grpc_fork``, from ``otel_verl.pth``), so that Ray's way of starting its daemons (a fork,
then exec) survives an OTLP/gRPC export in flight.

The processes here are started as ``opentelemetry-instrument`` starts a verl job's launcher, with
``opentelemetry-distro`` installed: its configurator imports gRPC before any instrumentor runs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import opentelemetry.distro  # noqa: F401 - the test extra installs it: an ImportError is a regression
import opentelemetry.instrumentation.auto_instrumentation as auto

from otel_verl.process import grpc_fork
from otel_verl.process.worker_bootstrap import SITE_DIR

AUTO_DIR = os.path.dirname(os.path.abspath(auto.__file__))
INSTRUMENT = shutil.which("opentelemetry-instrument", path=os.path.dirname(sys.executable))
FORKS = 500  # Ray-style children per case

# A launcher under opentelemetry-instrument: the distro's OTLP/gRPC metric exporter sends to an
# endpoint that accepts and never answers (a hung Collector) while the process starts children as
# Ray starts its daemons (subprocess.Popen with a preexec_fn: a plain fork, then exec).
PROBE = """
import os, subprocess, sys
from opentelemetry import metrics
metrics.get_meter("probe").create_counter("probe").add(1)
died = [rc for rc in (subprocess.Popen(["/bin/sh", "-c", "exit 7"], preexec_fn=lambda: None).wait()
                      for _ in range(int(sys.argv[1]))) if rc != 7]
print(os.environ.get("GRPC_ENABLE_FORK_SUPPORT"), "grpc" in sys.modules, died, flush=True)
os._exit(0)
"""


def _hung_endpoint() -> tuple[socket.socket, list]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    held: list = []

    def serve() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return server, held


def _launcher(port: int, forks: int, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GRPC_"))}
    clean.pop("PYTHONPATH", None)
    out = subprocess.run(
        [INSTRUMENT, sys.executable, "-c", PROBE, str(forks)],
        env={
            **clean,
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
            "OTEL_METRIC_EXPORT_INTERVAL": "100",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "verl",  # the distro's pipeline alone
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1].split(" ", 2)


def test_a_launchers_ray_style_children_all_start_while_its_grpc_exporter_hangs():
    server, held = _hung_endpoint()
    try:
        var, imported, died = _launcher(server.getsockname()[1], FORKS)
    finally:
        server.close()
    assert held  # the exporter did reach the endpoint and was left hanging
    assert (var, imported) == ("false", "True")  # set before the distro's exporter imported gRPC
    assert died == "[]"  # with gRPC's default, some die before exec (bench/README.md has the rate)


def test_the_users_own_setting_is_kept():
    server, _ = _hung_endpoint()
    try:
        # no children here: with gRPC's fork handlers on, such a child may also hang before exec
        var, _, _ = _launcher(server.getsockname()[1], 0, GRPC_ENABLE_FORK_SUPPORT="true")
    finally:
        server.close()
    assert var == "true"


def test_only_processes_that_run_opentelemetrys_bootstrap_are_changed():
    for path, expected in [
        (AUTO_DIR, "false"),
        (SITE_DIR + os.sep, "false"),
        (os.pathsep.join(["/opt/x", SITE_DIR]), "false"),
        ("", None),
        ("/opt/auto_instrumentation_tools", None),  # a look-alike name is not the bootstrap's folder
    ]:
        environ = {"PYTHONPATH": path} if path else {}
        grpc_fork.apply(environ)
        assert environ.get(grpc_fork.VAR) == expected, path
    environ = {"PYTHONPATH": AUTO_DIR, grpc_fork.VAR: "1"}
    grpc_fork.apply(environ)
    assert environ[grpc_fork.VAR] == "1"


def test_the_pth_line_calls_apply_and_is_installed():
    line = (Path(grpc_fork.__file__).parent / "otel_verl.pth").read_text()
    assert line.startswith("import ") and line.count("\n") == 1  # site runs a .pth line only if it is an import
    installed = [Path(p) / "otel_verl.pth" for p in sys.path if (Path(p) / "otel_verl.pth").is_file()]
    assert installed and installed[0].read_text() == line  # setup.sh's editable install has it too
