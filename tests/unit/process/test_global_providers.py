"""The plain OpenTelemetry API in a verl process reaches otel-verl's pipeline
(``otel_verl.process.global_providers``); a global provider someone else set is left alone.

Global providers can be set once per process, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from otel_verl import semconv
from otel_verl.offline.otlp_files import read_metric_points, read_spans

RUN_ID = "global-run"

# user code as a reward function writes it: tracer and histogram made at import, before any provider
USER_CODE = """
from opentelemetry import metrics, trace
tracer = trace.get_tracer("my.reward")
hist = metrics.get_meter("my.reward").create_histogram("my.reward.sentiment")
"""
BUILD = """
from otel_verl.process.state import PROCESS
PROCESS.identify(role="reward_worker")
tel = PROCESS.telemetry  # what the first hook in the process does
"""
RECORD = """
with tracer.start_as_current_span("my.reward.check"):
    hist.record(0.5, {"data_source": "tiny_add"})
tel.export_now()
tel.flush(5.0)
tel.shutdown(5.0)
"""


def _run(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(
        OTEL_VERL_RUN_ID=RUN_ID,
        OTEL_VERL_FILE_DIR=str(tmp_path),
        OTEL_TRACES_EXPORTER="otlp_json_file",
        OTEL_METRICS_EXPORTER="otlp_json_file",
        OTEL_LOGS_EXPORTER="none",
        OTEL_METRIC_EXPORT_INTERVAL="600000",
        **env,
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_user_spans_and_metrics_get_the_run_pipeline(tmp_path):
    _run(tmp_path, USER_CODE + BUILD + RECORD)
    (span,) = [s for s in read_spans(tmp_path) if s.name == "my.reward.check"]
    assert span.resource[semconv.RES_RUN_ID] == RUN_ID
    assert span.resource[semconv.RES_ROLE] == semconv.ROLE_REWARD_WORKER
    points = [p for p in read_metric_points(tmp_path) if p.name == "my.reward.sentiment"]
    assert points and points[-1].count == 1 and points[-1].value == 0.5
    assert points[-1].resource[semconv.RES_RUN_ID] == RUN_ID
    assert points[-1].attributes == {"data_source": "tiny_add"}


def test_a_global_provider_set_before_is_left_alone_and_said_once(tmp_path):
    theirs = """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    mine = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mine))
    trace.set_tracer_provider(provider)
    """
    check = """
    assert trace.get_tracer_provider() is provider
    assert [s.name for s in mine.get_finished_spans()] == ["my.reward.check"]
    from otel_verl.process import global_providers
    global_providers.install(tel.tracer_provider, tel.meter_provider, None)  # a second look: no second warning
    """
    proc = _run(tmp_path, textwrap.dedent(theirs) + USER_CODE + BUILD + RECORD + textwrap.dedent(check))
    assert proc.stderr.count("a global OpenTelemetry provider was already set for traces") == 1, proc.stderr
    assert "opentelemetry.sdk.trace.TracerProvider" in proc.stderr
    assert not [s for s in read_spans(tmp_path) if s.name == "my.reward.check"]  # theirs got it, not ours
    # the meter provider was free: user metrics still reach the run's pipeline
    assert [p for p in read_metric_points(tmp_path) if p.name == "my.reward.sentiment"]


def test_given_providers_leave_the_globals_alone(tmp_path):
    code = """
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from otel_verl import VerlInstrumentor
    from otel_verl.process.state import PROCESS
    VerlInstrumentor().instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    PROCESS.telemetry
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    assert type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    """
    _run(tmp_path, code)


def test_kill_switch_leaves_the_plain_api_as_without_otel_verl(tmp_path):
    code = """
    import otel_verl._verl_plugin  # what `import verl` loads in every verl process
    from opentelemetry import trace
    from otel_verl import VerlInstrumentor
    assert not VerlInstrumentor().is_instrumented_by_opentelemetry
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    """
    _run(tmp_path, code, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="verl")


def test_a_distros_providers_exit_within_the_shutdown_bound(tmp_path):
    """In the launcher opentelemetry-distro's configurator builds the SDK providers; with a hung
    endpoint the SDK's exit shutdown would wait its export timeout per signal. otel-verl bounds it
    by ``OTEL_VERL_SHUTDOWN_TIMEOUT`` like its own pipeline's."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import opentelemetry.instrumentation.auto_instrumentation as auto

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # accepts (the kernel's backlog) and never answers
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            PYTHONPATH=os.pathsep.join([os.path.dirname(auto.__file__), env.get("PYTHONPATH", "")]),
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{hung.getsockname()[1]}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_TIMEOUT="60",  # what the SDK alone would wait per export
            OTEL_VERL_SHUTDOWN_TIMEOUT="1",
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="system_metrics",
        )
        code = "from opentelemetry import metrics; metrics.get_meter('t').create_counter('c').add(1)"
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - start
    finally:
        hung.close()
    assert out.returncode == 0, out.stderr
    assert elapsed < 30, (elapsed, out.stderr[-2000:])  # half the export timeout; the bound is 1 s
