"""gRPC's fork handlers are off in every process that runs OpenTelemetry's bootstrap
(``process.grpc_fork``, from ``otel_verl.pth``), so that Ray's way of starting its daemons (a fork,
then exec) survives an OTLP/gRPC export in flight.

The processes here are started as ``opentelemetry-instrument`` starts a verl job's launcher, with
``opentelemetry-distro`` installed: its configurator imports gRPC before any instrumentor runs.
Programs that are not verl, under ``opentelemetry-instrument`` or not, are left as they are."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import opentelemetry.distro  # noqa: F401 - the test extra installs it: an ImportError is a regression
import opentelemetry.instrumentation.auto_instrumentation as auto

from otel_verl.process import grpc_fork
from otel_verl.process.worker_bootstrap import SITE_DIR

AUTO_DIR = os.path.dirname(os.path.abspath(auto.__file__))
INSTRUMENT = shutil.which("opentelemetry-instrument", path=os.path.dirname(sys.executable))
FORKS = 500  # Ray-style children per case
# the otel_verl under test first (the venv's editable install may be another checkout's)
SOURCE_ROOT = str(Path(grpc_fork.__file__).resolve().parents[2])

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


def _clean_env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GRPC_"))}
    clean["PYTHONPATH"] = SOURCE_ROOT
    return clean


def _launcher(port: int, forks: int, **env: str) -> list[str]:
    clean = _clean_env()
    # a verl launcher's command: a script of verl's (as `python verl/trainer/main_ppo.py`)
    script = Path(tempfile.mkdtemp()) / "verl" / "launch_probe.py"
    script.parent.mkdir()
    script.write_text(PROBE)
    out = subprocess.run(
        [INSTRUMENT, sys.executable, str(script), str(forks)],
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


VERL_ARGV = ["python", "-u", "-m", "verl.trainer.main_ppo", "trainer.total_epochs=1"]


def test_only_processes_of_a_verl_job_that_run_opentelemetrys_bootstrap_are_changed():
    for path, argv, run_id, expected in [
        (AUTO_DIR, VERL_ARGV, None, "false"),  # opentelemetry-instrument python -m verl.trainer.main_ppo
        (AUTO_DIR, ["python", "-mrecipe.dapo.main_dapo"], None, "false"),
        (AUTO_DIR, ["python", "-X", "dev", "/src/verl/verl/trainer/main_ppo.py"], None, "false"),
        (AUTO_DIR, ["python", "-c", "import verl"], "run-1", "false"),  # the launcher's children
        (SITE_DIR + os.sep, ["python", "default_worker.py"], None, "false"),  # a job's Ray worker
        (os.pathsep.join(["/opt/x", SITE_DIR]), ["python", "-c", "pass"], None, "false"),
        (AUTO_DIR, ["python", "-m", "flask", "run"], None, None),  # instrumented, not verl
        (AUTO_DIR, ["python", "-c", "import verl"], None, None),
        (AUTO_DIR, ["python", "/srv/app/serve.py"], None, None),
        ("", VERL_ARGV, "run-1", None),  # verl without OpenTelemetry's bootstrap
        ("/opt/auto_instrumentation_tools", VERL_ARGV, None, None),  # a look-alike name is not its folder
        ("/opt/my_worker_site", ["python", "-c", "pass"], None, None),
    ]:
        environ = {"PYTHONPATH": path} if path else {}
        if run_id:
            environ["OTEL_VERL_RUN_ID"] = run_id
        grpc_fork.apply(environ, argv)
        assert environ.get(grpc_fork.VAR) == expected, (path, argv, run_id)
    environ = {"PYTHONPATH": AUTO_DIR, grpc_fork.VAR: "1"}
    grpc_fork.apply(environ, VERL_ARGV)
    assert environ[grpc_fork.VAR] == "1"


def test_the_run_id_variable_is_configs():
    from otel_verl import config

    assert grpc_fork.RUN_ID_VAR == config.RUN_ID


ENVIRON_PROBE = "import json, os, sys; print(json.dumps(dict(os.environ)))"


def _environ_seen(argv: list[str], **env: str) -> tuple[dict[str, str], dict[str, str]]:
    """The environment a program sees once started (with the installed ``otel_verl.pth`` active,
    as any program of this venv), and the one it was given."""
    given = {**_clean_env(), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", **env}
    given["OTEL_LOGS_EXPORTER"] = "none"
    out = subprocess.run(argv, env=given, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), given


def _not_otels(environ: dict[str, str]) -> dict[str, str]:
    # opentelemetry-instrument's own changes: PYTHONPATH (its folder), OTEL_* (the distro's defaults)
    return {k: v for k, v in environ.items() if not k.startswith("OTEL_") and k != "PYTHONPATH"}


def test_programs_that_are_not_verl_start_with_their_environment_unchanged():
    seen, given = _environ_seen([sys.executable, "-c", ENVIRON_PROBE])
    assert seen == given
    seen, given = _environ_seen([INSTRUMENT, sys.executable, "-c", ENVIRON_PROBE])
    assert _not_otels(seen) == _not_otels(given)  # opentelemetry-instrument of another program
    # the control: a verl job's process does get the setting (a launcher's child: the job's run id)
    seen, given = _environ_seen([INSTRUMENT, sys.executable, "-c", ENVIRON_PROBE], OTEL_VERL_RUN_ID="run-1")
    assert _not_otels(seen) == {**_not_otels(given), grpc_fork.VAR: "false"}


def test_the_pth_line_calls_apply_and_is_installed():
    line = (Path(grpc_fork.__file__).parent / "otel_verl.pth").read_text()
    assert line.startswith("import ") and line.count("\n") == 1  # site runs a .pth line only if it is an import
    installed = [Path(p) / "otel_verl.pth" for p in sys.path if (Path(p) / "otel_verl.pth").is_file()]
    assert installed and installed[0].read_text() == line  # setup.sh's editable install has it too
