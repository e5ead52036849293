"""In the launcher, the global providers ``opentelemetry-distro``'s configurator builds with
``OTEL_*_EXPORTER=otlp_json_file`` write to ``distro-*`` files of the run folder, not the user's
console (``otel_verl.process.their_files``); a ``console`` exporter the user chose stays on stdout.

Global providers can be set once per process, so each case runs in a fresh interpreter, as
``opentelemetry-instrument`` starts the launcher: the distro's configurator first, then the
instrumentor.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import config, semconv
from otel_verl.cli import main as cli_main
from otel_verl.offline.otlp_files import read_log_records, read_metric_points, read_spans
from otel_verl.process import their_files
from otel_verl.process.resource import Identity

LAUNCHER = """
from opentelemetry import _logs, metrics, trace
from opentelemetry.distro import OpenTelemetryConfigurator
OpenTelemetryConfigurator().configure()  # what opentelemetry-instrument's sitecustomize does first

from otel_verl.instrumentor import VerlInstrumentor
VerlInstrumentor().instrument()

with trace.get_tracer("lib").start_as_current_span("lib.call"):
    metrics.get_meter("lib").create_counter("lib.calls").add(1)
    _logs.get_logger("lib").emit(body="lib said")
for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider()):
    provider.shutdown()
print("DONE")
"""


def _launch(tmp_path: Path, **exporters: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(
        OTEL_VERL_FILE_DIR=str(tmp_path),
        OTEL_METRIC_EXPORT_INTERVAL="600000",
        OTEL_TRACES_EXPORTER=exporters.get("traces", "otlp_json_file"),
        OTEL_METRICS_EXPORTER=exporters.get("metrics", "otlp_json_file"),
        OTEL_LOGS_EXPORTER=exporters.get("logs", "otlp_json_file"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LAUNCHER)], env=environ, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_distros_json_file_exporters_write_their_own_files_not_the_console(tmp_path, capsys):
    proc = _launch(tmp_path)
    assert proc.stdout == "DONE\n"  # no JSON batch on the user's console
    files = sorted(p.name.rsplit("-", 1)[0] for p in tmp_path.iterdir())
    prefix = semconv.DISTRO_FILE_PREFIX
    assert files == [f"{prefix}{s}-{semconv.ROLE_LAUNCHER}" for s in ("logs", "metrics", "traces")]
    for path in tmp_path.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600
    # no run identity in them: the run's readers leave them out ...
    assert read_spans(tmp_path) == [] and read_metric_points(tmp_path) == [] and read_log_records(tmp_path) == []
    # ... and replay sends them, each line as written
    with OtlpReceiver() as rx:
        assert cli_main(["replay", str(tmp_path), "--endpoint", rx.url]) == 0
    assert len(rx.span_ids()) == 1 and rx.metric_points() == 1 and rx.log_records() == 1
    assert "1 spans sent" in capsys.readouterr().out


def test_a_console_exporter_the_user_chose_stays_on_stdout(tmp_path):
    proc = _launch(tmp_path, traces="console", logs="none")
    assert '"name": "lib.call"' in proc.stdout  # the console exporter's own print
    assert sorted(p.name.rsplit("-", 2)[0] for p in tmp_path.iterdir()) == [f"{semconv.DISTRO_FILE_PREFIX}metrics"]


def test_a_path_or_stream_the_user_gave_is_left_alone(tmp_path, monkeypatch):
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter

    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path / "run"))
    config.settings.cache_clear()
    given = io.StringIO()
    for exporter in (FileSpanExporter(str(tmp_path / "mine.jsonl")), FileSpanExporter(stream=given)):
        assert not their_files._to_file(exporter, "traces", Identity(role=semconv.ROLE_LAUNCHER))
    assert their_files._to_file(FileSpanExporter(), "traces", Identity(role=semconv.ROLE_LAUNCHER))
    config.settings.cache_clear()


def test_a_private_name_gone_keeps_the_console_and_says_so(tmp_path, monkeypatch, caplog):
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter

    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    config.settings.cache_clear()
    exporter = FileSpanExporter()
    del exporter._exporter._lock  # a release that renamed it
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert not their_files._to_file(exporter, "traces", Identity(role=semconv.ROLE_LAUNCHER))
    assert exporter._exporter._stream is sys.stdout
    assert "_FileExporter._lock" in caplog.text
    config.settings.cache_clear()


def test_the_launchers_distro_data_does_not_name_the_run():
    """Its resource (no run id, no role, often no pid) is counted as one more process; the run's
    header keeps the service and run id of otel-verl's own resources."""
    from otel_verl.offline.run_reader import Senders

    senders = Senders()
    ours = {
        semconv.RES_RUN_ID: "r1",
        semconv.RES_SERVICE_NAME: "verl",
        semconv.RES_ROLE: "taskrunner",
        "process.pid": 7,
    }
    senders.add(ours, 3)
    senders.add({semconv.RES_SERVICE_NAME: "unknown_service:python"}, 1)
    assert dict(senders.meta) == {semconv.RES_RUN_ID: {"r1"}, semconv.RES_SERVICE_NAME: {"verl"}}
    assert dict(senders.counts) == {"taskrunner pid 7": 3, "unknown_service:python (no verl role)": 1}
