"""Python logging exported as OTel logs, joined to the step trace."""

from __future__ import annotations

import json
import logging

import pytest

from otel_verl import config, semconv
from otel_verl.process import logs
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own


def _otel_handlers():
    from opentelemetry.sdk._logs import LoggingHandler

    return [h for h in logging.getLogger().handlers if isinstance(h, LoggingHandler)]


def test_warning_inside_a_stage_carries_that_stage_spans_ids(logged, v0_trainer):
    from verl.utils.profiler import marked_timer

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            logging.getLogger("verl.workers.rollout").warning("rollout server slow: %d s", 12)
    spans = {s.name: s for s in logged.spans.get_finished_spans()}
    (record,) = logged.records()
    gen = spans["verl.gen"]
    assert record.body == "rollout server slow: 12 s"
    assert record.severity_text == "WARN"
    assert record.trace_id == gen.context.trace_id == spans[semconv.SPAN_STEP].context.trace_id
    assert record.span_id == gen.context.span_id


def test_default_level_is_warning_so_info_is_not_exported(logged):
    verl_logger = logging.getLogger("verl.trainer")
    old = verl_logger.level
    verl_logger.setLevel(logging.DEBUG)  # verl's own level lets INFO through; our handler must not
    try:
        verl_logger.info("info chatter")
        verl_logger.warning("a warning")
    finally:
        verl_logger.setLevel(old)
    assert [r.body for r in logged.records()] == ["a warning"]


def test_log_level_setting_exports_info_too(monkeypatch):
    monkeypatch.setenv("OTEL_VERL_LOG_LEVEL", "info")
    config.settings.cache_clear()
    assert config.settings().log_level == logging.INFO
    monkeypatch.setenv("OTEL_VERL_LOG_LEVEL", "LOUD")
    config.settings.cache_clear()
    assert config.settings().log_level == logging.WARNING  # bad value: warned, default kept
    config.settings.cache_clear()


def test_own_and_sdk_loggers_are_not_exported(logged):
    logging.getLogger("opentelemetry.exporter.otlp").warning("export failed")
    logging.getLogger("otel_verl.process.telemetry").warning("flush timeout")
    assert logged.records() == []


def test_uninstrument_removes_exactly_our_handler(logged):
    assert len(_otel_handlers()) == 1
    logged.instrumentor.uninstrument()
    assert _otel_handlers() == []
    logging.getLogger("verl").warning("after uninstrument")
    assert logged.records() == []


def test_no_second_handler_when_one_is_installed_already():
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler

    root = logging.getLogger()
    with pytest.warns(DeprecationWarning):
        distro = LoggingHandler(logger_provider=LoggerProvider())  # what the distro installs
    root.addHandler(distro)
    try:
        assert logs.attach(LoggerProvider()) is None
        assert _otel_handlers() == [distro]
    finally:
        root.removeHandler(distro)
        logs.detach()


@pytest.fixture
def files(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-7")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    config.settings.cache_clear()
    yield monkeypatch, tmp_path
    logs.detach()
    config.settings.cache_clear()


def test_pipeline_writes_logs_file_with_trace_ids_and_resource(files):
    monkeypatch, folder = files
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp_json_file")
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    assert tel.logger_provider is not None
    with tel.tracer.start_as_current_span("verl.step") as span:
        logging.getLogger("verl").error("inside the step")
    logging.getLogger("verl").error("outside")
    tel.flush(10)
    tel.shutdown(10)
    (path,) = folder.glob("logs-taskrunner-*.jsonl")
    batches = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for b in batches for rl in b["resourceLogs"] for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    by_body = {r["body"]["stringValue"]: r for r in records}
    assert by_body["inside the step"]["traceId"] == format(span.get_span_context().trace_id, "032x")
    assert by_body["inside the step"]["spanId"] == format(span.get_span_context().span_id, "016x")
    assert not by_body["outside"].get("traceId")
    resource = {a["key"]: a["value"] for a in batches[0]["resourceLogs"][0]["resource"]["attributes"]}
    assert resource[semconv.RES_RUN_ID] == {"stringValue": "run-7"}
    assert resource[semconv.RES_ROLE] == {"stringValue": "taskrunner"}


def test_logs_exporter_none_means_no_provider_and_no_handler(files):
    monkeypatch, folder = files
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    assert tel.logger_provider is None
    assert _otel_handlers() == []
    tel.shutdown(5)
    assert not list(folder.glob("logs-*"))
