"""``otel_verl.per_process``: every piece of per-process state known in one place, one ``reset()``
that makes the process as just started, one fork handler that runs every module's ``after_fork``."""

from __future__ import annotations

import io
import logging
import os
import threading
import time

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

from otel_verl import config, per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.hooks import accounting, compat
from otel_verl.offline.otlp_files import read_spans
from otel_verl.process import logs, step_reader, telemetry
from otel_verl.process.idle_export import IdleExport
from otel_verl.process.state import PROCESS
from otel_verl.process.step_reader import StepMetricReader
from otel_verl.spool import exporters, stats, store
from otel_verl.stall import reporter


def test_reset_makes_the_process_as_just_started(caplog):
    PROCESS.identify(role=semconv.ROLE_LAUNCHER)  # as the stall reporter names a process no hook named
    PROCESS.use_providers(object(), object())
    stats.count("traces", "spooled", 10)
    warn_once("per-process test", "said once")
    handler = logs.attach(LoggerProvider())  # a pipeline's: dropped with it, its handler goes too
    assert handler in logging.getLogger().handlers
    per_process.reset()
    assert handler not in logging.getLogger().handlers
    assert PROCESS.identity.role == semconv.ROLE_UNKNOWN and not PROCESS.built
    assert stats.counts() == {}
    assert reporter.REPORTER.seen is None
    caplog.clear()
    warn_once("per-process test", "said once")
    assert [r.getMessage() for r in caplog.records] == ["otel-verl: said once"]


def test_reset_forgets_the_settings_read_so_the_next_test_reads_its_own(monkeypatch):
    """A process that just started has read no settings: one test's environment (its ``monkeypatch``)
    must not stay in the settings of the next test, which sets its own and builds a pipeline."""
    monkeypatch.setenv(config.SHUTDOWN_TIMEOUT, "1.5")
    config.settings.cache_clear()
    assert config.settings().shutdown_timeout_s == 1.5  # read, as a pipeline or a hook reads it
    per_process.reset()
    monkeypatch.setenv(config.SHUTDOWN_TIMEOUT, "2.5")  # the next test's
    assert config.settings().shutdown_timeout_s == 2.5


def test_every_module_with_state_registers_once_at_import_in_import_order():
    names = per_process.registered()
    for module in (store, stats, exporters, compat, accounting, PROCESS.__class__.__module__):
        name = module if isinstance(module, str) else module.__name__
        assert names.count(name) == 1
    # the fork handlers of the spool run as before: the store's (and its counts) before the exporters'
    assert names.index(stats.__name__) < names.index(store.__name__) < names.index(exporters.__name__)


def test_one_fork_handler_runs_each_after_fork_in_order_past_one_that_fails(monkeypatch):
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("broken")

    monkeypatch.setattr(per_process, "_STATES", dict(per_process._STATES))  # this test's own entries
    per_process.register("test.first", after_fork=failing)
    per_process.register("test.second", after_fork=lambda: ran.append("second"))
    per_process.register("test.reset_only", reset=lambda: ran.append("reset"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what ran after the fork, through the pipe
        try:
            os.write(write, ",".join(ran).encode())
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert got == "failing,second"
    assert ran == []  # the parent ran none


def test_only_this_module_registers_a_fork_handler():
    import otel_verl

    root = os.path.dirname(otel_verl.__file__)
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if "register_at_fork(" in f.read():
                        found.append(os.path.relpath(path, root))
    assert found == ["per_process.py"]


def test_reset_shuts_the_pipeline_a_test_built_down_and_ends_its_threads_within_a_bound(monkeypatch, tmp_path):
    """A test's pipeline must not run on into the next test: ``reset()`` shuts it down (what it holds
    is exported, nothing later is) and ends each thread it started (the step metric reader's, the span
    and log processors', the recorder and flusher), within ``RESET_BOUND_S``."""
    for signal in ("TRACES", "METRICS", "LOGS"):
        monkeypatch.setenv(f"OTEL_{signal}_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # spans wait in the processor: only a shutdown sends them
    config.settings.cache_clear()  # reset() forgets them again
    before = set(threading.enumerate())
    tel = PROCESS.telemetry
    assert tel.owned
    gauge = tel.meter.create_gauge("verl.actor.kl_loss")
    tel.submit(lambda: gauge.set(0.5))  # the recorder thread
    with tel.tracer.start_as_current_span("verl.step"):
        logging.getLogger("verl.test").warning("a record for the log processor")
    tel.request_flush(coalesce=True)  # the flusher thread, in its coalescing wait
    assert tel.drain(5.0)
    started = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    names = {t.name for t in started}
    assert {"otel-verl-record", "otel-verl-flusher", "otel-verl-metrics"} <= names, names
    assert sum(n.startswith("OtelBatch") for n in names) == 2, names

    start = time.monotonic()
    per_process.reset()
    spent = time.monotonic() - start

    assert spent < telemetry.RESET_BOUND_S, spent
    assert [t.name for t in started if t.is_alive()] == []  # each ended within the bound
    assert not PROCESS.built
    assert [s.name for s in read_spans(tmp_path)] == ["verl.step"]  # shut down: what it held went out
    with tel.tracer.start_as_current_span("after.reset"):
        pass
    tel.tracer_provider.force_flush()
    assert [s.name for s in read_spans(tmp_path)] == ["verl.step"]  # and nothing later does


def test_reset_ends_the_thread_of_a_step_reader_no_pipeline_shut_down():
    """A reader a test made on its own (no pipeline shuts it down) collects no more after ``reset()``:
    its thread ends, within its bound."""
    before = set(threading.enumerate())
    StepMetricReader(ConsoleMetricExporter(out=io.StringIO()), export_interval_millis=3_600_000)
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "otel-verl-metrics"]
    start = time.monotonic()
    per_process.reset()
    assert time.monotonic() - start < step_reader.RESET_BOUND_S
    assert not thread.is_alive()


def test_reset_does_not_wait_out_an_idle_export_of_the_pipeline(captured):
    """A worker's idle export waits in the pipeline's recorder thread until the gap since the last one
    ends; ``reset()`` (as the process's exit) ends that wait: the thread ends within the bound, not
    after the gap, and never exports into the next test."""
    calls = IdleExport(gap_s=600.0)
    before = set(threading.enumerate())
    calls.begin()
    calls.end()  # the first export goes at once
    assert PROCESS.telemetry.drain(5.0)
    calls.begin()
    calls.end()  # the next one waits for the gap, in the recorder thread
    (recorder,) = [t for t in set(threading.enumerate()) - before if t.name == "otel-verl-record"]
    start = time.monotonic()
    per_process.reset()
    spent = time.monotonic() - start
    assert not recorder.is_alive()
    assert spent < telemetry.RESET_BOUND_S, spent
