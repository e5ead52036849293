"""``OTEL_METRICS_EXPORTER=prometheus``: one pull endpoint per process, run labels on every series."""

from __future__ import annotations

import logging
import os
import socket
import stat
import urllib.request
from pathlib import Path

import pytest

from otel_verl import config, semconv
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_free_ports() -> int:
    """A port P with P+1 free too, below the ephemeral range (32768+), where no outgoing
    connection takes P+1 between this check and the second pipeline's bind."""
    import random

    while True:
        first = random.randrange(20000, 32000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", first))
                b.bind(("127.0.0.1", first + 1))
        except OSError:
            continue
        return first


def _prometheus_pull_only(monkeypatch) -> int:
    """Metrics to the per-process pull endpoint only, on 127.0.0.1 from a port P with P+1 free; P."""
    first = _two_free_ports()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(first))
    config.settings.cache_clear()
    return first


def test_each_process_takes_the_next_free_port_and_labels_series_with_the_run(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-prom")
    first = _prometheus_pull_only(monkeypatch)
    try:
        # Two pipelines in one process stand in for two verl processes of one host.
        a = build_own(Identity(role=semconv.ROLE_TASKRUNNER, experiment="exp"))
        b = build_own(Identity(role=semconv.ROLE_WORKER, rank=0, experiment="exp"))
        a.meter.create_gauge(semconv.M_KL).set(0.25, {semconv.ATTR_KL_SOURCE: "kl_loss"})
        b.meter.create_counter(semconv.M_TRAINING_STEPS, unit="{step}").add(1)
        pages = []
        for port in (first, first + 1):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                pages.append(resp.read().decode())
    finally:
        config.settings.cache_clear()
    kl = next(line for line in pages[0].splitlines() if line.startswith("verl_training_kl{"))
    assert 'verl_run_id="run-prom"' in kl and 'verl_process_role="taskrunner"' in kl
    assert 'verl_experiment="exp"' in kl and 'verl_kl_source="kl_loss"' in kl and kl.endswith(" 0.25")
    steps = next(line for line in pages[1].splitlines() if line.startswith("verl_training_steps_total{"))
    assert 'verl_process_role="worker"' in steps and 'verl_rank="0"' in steps
    assert "verl_training_kl" not in pages[1]  # each process serves only its own metrics


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "65536", "1e4", "٣", " "])
def test_a_bad_port_setting_is_one_warning_and_the_default_port_and_other_signals_go_on(
    monkeypatch, tmp_path, caplog, raw
):
    import prometheus_client

    from otel_verl.process import exporters

    tried = []
    monkeypatch.setattr(prometheus_client, "start_http_server", lambda port, addr, registry: tried.append(port))
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-port")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", raw)
    config.settings.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="otel_verl"):
            telemetry = build_own(Identity(role=semconv.ROLE_TASKRUNNER))  # must not raise
        with telemetry.tracer.start_as_current_span("a step"):
            pass
        telemetry.tracer_provider.force_flush()
    finally:
        config.settings.cache_clear()
    assert tried == [exporters.PROMETHEUS_DEFAULT_PORT]  # the first port tried: the default, not -1 or 0
    assert list(tmp_path.glob("traces-*.jsonl"))  # the traces of that process are exported all the same
    warned = [r.getMessage() for r in caplog.records if "OTEL_EXPORTER_PROMETHEUS_PORT" in r.getMessage()]
    assert len(warned) == (1 if raw.strip() else 0)


def test_the_port_range_ends_at_65535():
    from otel_verl.process import exporters

    assert exporters.prometheus_port({"OTEL_EXPORTER_PROMETHEUS_PORT": "65530"}) == (65530, None)
    assert list(exporters.prometheus_ports(65530)) == [65530, 65531, 65532, 65533, 65534, 65535]


def test_a_json_file_exists_only_once_the_process_exported_something(monkeypatch, tmp_path):
    """A rollout server that never makes a span leaves no empty traces file: each file is created
    at its first line (``exporters.LazyFile``), and later lines are appended."""
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-lazy")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    for signal in ("TRACES", "METRICS"):
        monkeypatch.setenv(f"OTEL_{signal}_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")  # a logging handler would outlive the test
    config.settings.cache_clear()
    try:
        telemetry = build_own(Identity(role=semconv.ROLE_ROLLOUT_SERVER))
        telemetry.tracer_provider.force_flush()
        assert list(tmp_path.iterdir()) == []  # nothing exported yet: no file
        for _ in range(2):
            with telemetry.tracer.start_as_current_span("one"):
                pass
            telemetry.tracer_provider.force_flush()
        telemetry.shutdown()
    finally:
        config.settings.cache_clear()
    (traces,) = tmp_path.glob("traces-*.jsonl")
    assert len(traces.read_text().splitlines()) == 2  # appended to the one file


def _json_file_run(monkeypatch, folder, plant=None) -> str:
    """One span exported by a pipeline with the JSON-file exporters into ``folder``; ``plant(path)``
    first puts something at the traces file's (predictable) name. Returns that name."""
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-files")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(folder))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    config.settings.cache_clear()
    identity = Identity(role=semconv.ROLE_TASKRUNNER)
    from otel_verl.process import exporters

    path = exporters.file_path("traces", identity)
    if plant is not None:
        plant(path)
    try:
        telemetry = build_own(identity)
        for _ in range(2):
            with telemetry.tracer.start_as_current_span("one"):
                pass
            telemetry.tracer_provider.force_flush()
        telemetry.shutdown()
    finally:
        config.settings.cache_clear()
    return path


def test_json_files_are_the_users_own_in_a_folder_of_their_own(monkeypatch, tmp_path):
    """Telemetry holds the run's config, host names and errors: 0600 files, a 0700 folder when
    otel-verl makes it, whatever the umask (which is left as it was)."""
    old = os.umask(0o022)
    try:
        path = _json_file_run(monkeypatch, tmp_path / "made" / "here")
        assert os.umask(0o022) == 0o022  # untouched
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "made" / "here").st_mode) == 0o700
    assert len(open(path).read().splitlines()) == 2


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "hard link", "fifo", "folder"])
def test_a_planted_file_at_the_json_files_name_is_never_written_through(monkeypatch, tmp_path, caplog, kind):
    """Another local user can guess ``traces-<role>-<pid>.jsonl`` in a shared folder and plant a link
    there: the target stays untouched, the process writes no file there and says so once."""
    target = tmp_path / "victim"
    target.write_text("precious\n")

    def plant(path: str) -> None:
        if kind == "symlink":
            os.symlink(target, path)
        elif kind == "dangling symlink":
            os.symlink(tmp_path / "created-through-link", path)
        elif kind == "hard link":
            os.link(target, path)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            os.mkdir(path)

    with caplog.at_level(logging.WARNING):
        path = _json_file_run(monkeypatch, tmp_path, plant)
    assert target.read_text() == "precious\n"
    assert not (tmp_path / "created-through-link").exists()
    warned = [r.getMessage() for r in caplog.records if path in r.getMessage()]
    assert len(warned) == 1 and "writes no telemetry" in warned[0], warned


def test_a_file_of_this_user_left_by_an_earlier_process_of_the_same_pid_is_appended_to(monkeypatch, tmp_path):
    path = _json_file_run(monkeypatch, tmp_path, lambda p: Path(p).write_text('{"earlier": 1}\n'))
    lines = Path(path).read_text().splitlines()
    assert lines[0] == '{"earlier": 1}' and len(lines) == 3


def test_the_pull_endpoint_serves_the_engines_histogram_as_one(monkeypatch):
    """A rollout server's pull reader adds the engine's histograms (``engine_metrics``) too: its
    ``/metrics`` has the engine's buckets as one histogram, ``_bucket``/``_sum``/``_count``."""
    from prometheus_client import CollectorRegistry, Histogram

    from otel_verl.hooks.rollout import engine_metrics

    first = _prometheus_pull_only(monkeypatch)
    registry = CollectorRegistry()
    ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", ["engine"], buckets=(0.1, 1.0), registry=registry)
    for v in (0.05, 0.5, 5.0):
        ttft.labels(engine="0").observe(v)
    try:
        tel = build_own(Identity(role=semconv.ROLE_ROLLOUT_SERVER))
        tel.meter.create_gauge("verl.some.gauge").set(1)
        engine_metrics._STATE.bridge = engine_metrics.Bridge(tel.meter, registry, replica=2)
        engine_metrics._STATE.bridge.discover(force=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{first}/metrics", timeout=10) as resp:
            page = resp.read().decode()
    finally:
        config.settings.cache_clear()
    lines = [line for line in page.splitlines() if line.startswith("vllm_time_to_first_token_seconds")]
    bucket = {line.split('le="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in lines if "_bucket{" in line}
    assert bucket == {"0.1": "1.0", "1.0": "2.0", "+Inf": "3.0"}, lines
    assert any(line.startswith("vllm_time_to_first_token_seconds_count{") and line.endswith(" 3.0") for line in lines)
    assert all('verl_rollout_replica="2"' in line for line in lines)
