"""docs/recipes.md, run: each recipe's settings, as the page gives them, deliver a small pipeline
of otel-verl's own (``build_own``: a step span, step metrics, a log record) to a real component
that behaves like the backend it names.

The stand-in vendor is one real Collector (the otelcol-verl build) with an OTLP/HTTP receiver per
vendor, each behind the ``bearertokenauth`` extension set to check exactly the header that vendor
takes (``Authorization: Basic`` for Grafana Cloud, ``x-honeycomb-team`` for Honeycomb,
``dd-api-key`` for Datadog), writing what it accepts with the debug exporter to a file per vendor.
A request without the right header is refused (401), so a record in the file proves the auth
header arrived. Our build has no ``basicauth`` extension: ``bearertokenauth`` with scheme
``Basic`` checks the same ``Authorization`` value a basic-auth server does.

The Prometheus 3 recipe runs the Go-built Prometheus 3 with nothing but
``--web.enable-otlp-receiver`` (no ``otlp:`` block, so no promoted resource attributes) and picks
the run through ``target_info``.

The stand-in vendor starts once for the module; each recipe starts its own Collector or Prometheus
(well under a second) and costs one to six seconds.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.components import require
from support.opskit import backends_dir, get_json, poll_until, require_backend_build
from verl_cpu_harness.ports import free_ports

from otel_verl import config, semconv
from otel_verl.process import logs, otlp_headers
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own

pytestmark = pytest.mark.live_stack  # the Go-built backends: runs last, may still be building

COLLECTOR_DIR = Path(__file__).resolve().parents[2] / "collector"
EXPORT_OVERLAY = COLLECTOR_DIR / "otelcol-export-http.yaml"

# The secrets each stand-in vendor takes; none of them may ever appear in a Collector's log.
GRAFANA_USER, GRAFANA_TOKEN = "123456", "glc_s3cret-grafana-token"
GRAFANA_BASIC = base64.b64encode(f"{GRAFANA_USER}:{GRAFANA_TOKEN}".encode()).decode()
HONEYCOMB_KEY = "hcaik_s3cret-honeycomb-key"
DATADOG_KEY = "dd0s3cretdatadogapikey"
SECRETS = (GRAFANA_TOKEN, GRAFANA_BASIC, HONEYCOMB_KEY, DATADOG_KEY)

# (vendor, header the vendor checks, scheme before the secret, secret, the URL path prefix of its OTLP API)
VENDORS = (
    ("grafana", "Authorization", "Basic", GRAFANA_BASIC, "/otlp"),
    ("honeycomb", "x-honeycomb-team", "", HONEYCOMB_KEY, ""),
    ("datadog", "dd-api-key", "", DATADOG_KEY, ""),
)


def _binary(name: str) -> str:
    require_backend_build()
    path = backends_dir() / name
    if not path.is_file():
        require(name, f"not in {backends_dir()}: `bash scripts/backends.sh` builds it")
    return str(path)


def _vendor_config(ports: dict[str, int], out: Path) -> str:
    """One Collector, an authenticated OTLP/HTTP receiver and a debug file per vendor."""
    lines = ["extensions:"]
    for name, header, scheme, secret, _ in VENDORS:
        lines += [
            f"  bearertokenauth/{name}:",
            f"    header: {header}",
            f'    scheme: "{scheme}"',
            f'    token: "{secret}"',
        ]
    lines += ["receivers:"]
    for name, _, _, _, prefix in VENDORS:
        lines += [
            f"  otlp/{name}:",
            "    protocols:",
            "      http:",
            f"        endpoint: 127.0.0.1:{ports[name]}",
            f"        auth: {{authenticator: bearertokenauth/{name}}}",
            f"        traces_url_path: {prefix}/v1/traces",
            f"        metrics_url_path: {prefix}/v1/metrics",
            f"        logs_url_path: {prefix}/v1/logs",
        ]
    lines += ["exporters:"]
    for name, *_ in VENDORS:
        lines += [
            f"  debug/{name}:",
            "    verbosity: detailed",
            "    use_internal_logger: false",
            f"    output_paths: [{out / name}.txt]",
            "    sampling_initial: 100000",
            "    sampling_thereafter: 1",
        ]
    lines += [
        "service:",
        f"  extensions: [{', '.join(f'bearertokenauth/{n}' for n, *_ in VENDORS)}]",
        "  telemetry:",
        "    metrics: {level: none}",
        "  pipelines:",
    ]
    for name, *_ in VENDORS:
        for signal in ("traces", "metrics", "logs"):
            lines += [f"    {signal}/{name}: {{receivers: [otlp/{name}], exporters: [debug/{name}]}}"]
    return "\n".join(lines) + "\n"


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        env={**os.environ, **(env or {})},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        return exc.code in (401, 405)  # listening: a vendor receiver without credentials, GET on POST


class Vendor:
    """The stand-in vendor Collector: ``url(name)``, ``received(name)``."""

    def __init__(self, folder: Path, ports: dict[str, int]) -> None:
        self.folder, self.ports = folder, ports

    def url(self, name: str) -> str:
        prefix = {n: p for n, *_, p in VENDORS}[name]
        return f"http://127.0.0.1:{self.ports[name]}{prefix}"

    def received(self, name: str) -> str:
        path = self.folder / f"{name}.txt"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def vendor(tmp_path_factory) -> Iterator[Vendor]:
    binary = _binary("otelcol-verl")
    folder = tmp_path_factory.mktemp("vendor")
    ports = free_ports([name for name, *_ in VENDORS])
    config_path = folder / "vendor.yaml"
    config_path.write_text(_vendor_config(ports, folder))
    proc = _start([binary, f"--config={config_path}"], folder / "vendor.log")
    try:
        for name, *_ in VENDORS:
            poll_until(
                f"the {name} stand-in ({folder / 'vendor.log'})",
                lambda n=name: _answers(Vendor(folder, ports).url(n) + "/v1/traces"),
                60,
                0.2,
            )
        yield Vendor(folder, ports)
    finally:
        _stop(proc)


class Gateway:
    """A Collector with otelcol-export-http.yaml on top of ``base``: where processes send, its log."""

    def __init__(self, tmp: Path, base: str, env: dict[str, str]) -> None:
        self.ports = free_ports(["grpc", "http", "health", "metrics"])
        self.log = tmp / f"otelcol-{base}.log"
        self.env = {
            "OTELCOL_OTLP_GRPC_PORT": str(self.ports["grpc"]),
            "OTELCOL_OTLP_HTTP_PORT": str(self.ports["http"]),
            "OTELCOL_HEALTH_PORT": str(self.ports["health"]),
            "OTELCOL_METRICS_PORT": str(self.ports["metrics"]),
            "OTELCOL_STORAGE_DIR": str(tmp / f"queue-{base}"),
            **env,
        }
        self.cmd = [_binary("otelcol-verl"), f"--config={COLLECTOR_DIR / base}", f"--config={EXPORT_OVERLAY}"]

    def __enter__(self) -> Gateway:
        self.proc = _start(self.cmd, self.log, self.env)
        health = f"http://127.0.0.1:{self.ports['health']}/"
        poll_until(
            f"the Collector's health check ({self.log})", lambda: self.proc.poll() is None and _answers(health), 60, 0.2
        )
        return self

    def __exit__(self, *exc: object) -> None:
        _stop(self.proc)

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


def _headers_file(folder: Path, text: str) -> str:
    path = folder / f"headers-{uuid.uuid4().hex[:6]}"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def _send_pipeline(monkeypatch, env: dict[str, str]) -> str:
    """otel-verl's own pipeline (``build_own``) from ``env``: a step span, two steps of a gauge, a
    counter and a histogram, a log record; flushed and shut down. Returns the run id."""
    run_id = f"recipe-{uuid.uuid4().hex[:8]}"
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP") or name == config.OTLP_HEADERS_FILE:
            monkeypatch.delenv(name)
    for name, value in {"OTEL_VERL_RUN_ID": run_id, "OTEL_METRIC_EXPORT_INTERVAL": "600000", **env}.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()
    otlp_headers.file_headers.cache_clear()
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER, project="recipes", experiment="exp"))
    try:
        gauge = tel.meter.create_gauge(semconv.M_TRAINING_STEP)
        counter = tel.meter.create_counter("recipe.tokens")
        histogram = tel.meter.create_histogram("recipe.duration", unit="s")
        for step in (1, 2):
            with tel.tracer.start_as_current_span("verl.step"):
                gauge.set(step)
                counter.add(10)
                histogram.record(0.5)
                logging.getLogger("verl.recipe").warning("recipe log line %s", run_id)
            tel.mark_step()
        tel.flush(10)
    finally:
        tel.shutdown(10)
        logs.detach()  # the root logger's handler is attached once per process: the next pipeline's
        config.settings.cache_clear()
        otlp_headers.file_headers.cache_clear()
    return run_id


def _has_all_signals(text: str, run_id: str) -> bool:
    """Whether the debug exporter's ``text`` holds this run's spans, metrics and log records: a
    resource block of each signal with the run's id and what the pipeline sent in it."""
    wanted = {
        "ResourceSpans #": "Name           : verl.step",
        "ResourceMetrics #": f"-> Name: {semconv.M_TRAINING_STEP}\n",
        "ResourceLog #": f"recipe log line {run_id}",
    }
    return all(
        any(run_id in block and marker in block for block in text.split(start)[1:]) for start, marker in wanted.items()
    )


@pytest.fixture
def spool_env(tmp_path) -> dict[str, str]:
    return {config.SPOOL_DIR: str(tmp_path / "spool"), "OTEL_LOGS_EXPORTER": "otlp"}


def _assert_no_secret(*logs: str) -> None:
    for text in logs:
        for secret in SECRETS:
            assert secret not in text, f"a credential in a log: {text[-2000:]}"


def test_grafana_cloud_through_a_gateway_with_basic_auth(vendor, tmp_path, monkeypatch, spool_env):
    """Recipe "Grafana Cloud": processes -> OTLP/gRPC -> gateway (otelcol-config.yaml +
    otelcol-export-http.yaml) -> OTLP/HTTP with ``Authorization: Basic`` from the headers file."""
    headers = _headers_file(tmp_path, f"Authorization: Basic {GRAFANA_BASIC}\n")
    env = {"OTELCOL_EXPORT_ENDPOINT": vendor.url("grafana"), "OTELCOL_EXPORT_HEADERS_FILE": headers}
    with Gateway(tmp_path, "otelcol-config.yaml", env) as gw:
        run_id = _send_pipeline(
            monkeypatch, {**spool_env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{gw.ports['grpc']}"}
        )
        poll_until(
            "traces, metrics and logs at the Grafana stand-in",
            lambda: _has_all_signals(vendor.received("grafana"), run_id),
            30,
            0.3,
        )
        _assert_no_secret(gw.logged())

    # The same gateway with a wrong password: refused by the vendor, said in the gateway's log
    # without the credential.
    wrong_basic = base64.b64encode(b"123456:wrong-s3cret").decode()
    wrong = _headers_file(tmp_path, f"Authorization: Basic {wrong_basic}\n")
    with Gateway(tmp_path, "otelcol-config.yaml", {**env, "OTELCOL_EXPORT_HEADERS_FILE": wrong}) as gw:
        run_id = _send_pipeline(
            monkeypatch, {**spool_env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{gw.ports['grpc']}"}
        )
        poll_until(
            "the gateway says the vendor refused",
            lambda: "401" in gw.logged() or "Unauthorized" in gw.logged(),
            30,
            0.3,
        )
        assert run_id not in vendor.received("grafana")
        text = gw.logged()
        assert "wrong-s3cret" not in text and wrong_basic not in text, text[-2000:]
        _assert_no_secret(text)


def test_a_malformed_gateway_headers_file_stops_the_collector_without_showing_it(tmp_path):
    """A headers file of the wrong shape (the bare key, not ``Name: value``) is a start error that
    names the setting, never the content."""
    headers = _headers_file(tmp_path, f"{HONEYCOMB_KEY}\n")
    res = subprocess.run(
        [
            _binary("otelcol-verl"),
            "validate",
            f"--config={COLLECTOR_DIR / 'otelcol-config.yaml'}",
            f"--config={EXPORT_OVERLAY}",
        ],
        env={
            **os.environ,
            "OTELCOL_EXPORT_ENDPOINT": "https://api.honeycomb.io",
            "OTELCOL_EXPORT_HEADERS_FILE": headers,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0
    assert "headers" in res.stderr and HONEYCOMB_KEY not in res.stdout + res.stderr, res.stderr


def test_honeycomb_straight_from_the_processes(vendor, tmp_path, monkeypatch, spool_env):
    """Recipe "Honeycomb": no Collector; OTLP/HTTP from every process, the team key from
    OTEL_VERL_OTLP_HEADERS_FILE (kept off Ray's runtime_env)."""
    headers = _headers_file(tmp_path, f"x-honeycomb-team: {HONEYCOMB_KEY}\nx-honeycomb-dataset: verl-metrics\n")
    run_id = _send_pipeline(
        monkeypatch,
        {
            **spool_env,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": vendor.url("honeycomb"),
            config.OTLP_HEADERS_FILE: headers,
        },
    )
    poll_until(
        "traces, metrics and logs at the Honeycomb stand-in",
        lambda: _has_all_signals(vendor.received("honeycomb"), run_id),
        30,
        0.3,
    )


def _temporalities(text: str, run_id: str, metric: str) -> list[str]:
    """The AggregationTemporality lines of ``metric`` in the debug exporter's text of this run."""
    out = []
    for block in text.split("ResourceMetrics #")[1:]:
        if run_id not in block:
            continue
        for part in block.split("Metric #")[1:]:
            if f"-> Name: {metric}\n" in part:
                out += [line.split(":", 1)[1].strip() for line in part.splitlines() if "AggregationTemporality" in line]
    return out


def test_datadog_through_a_node_collector_with_delta_temporality(vendor, tmp_path, monkeypatch, spool_env):
    """Recipes "Datadog" and "an agent straight to a vendor": one Collector per node
    (otelcol-config.yaml + otelcol-export-http.yaml, no gateway tier), ``dd-api-key`` from the
    headers file, and delta temporality from the processes, which the Collector passes through:
    the counter and the histogram arrive as Delta, never Cumulative."""
    headers = _headers_file(tmp_path, f"dd-api-key: {DATADOG_KEY}\n")
    env = {"OTELCOL_EXPORT_ENDPOINT": vendor.url("datadog"), "OTELCOL_EXPORT_HEADERS_FILE": headers}
    with Gateway(tmp_path, "otelcol-config.yaml", env) as agent:
        run_id = _send_pipeline(
            monkeypatch,
            {
                **spool_env,
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.ports['grpc']}",
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
            },
        )
        poll_until(
            "traces, metrics and logs at the Datadog stand-in",
            lambda: _has_all_signals(vendor.received("datadog"), run_id),
            30,
            0.3,
        )
        text = vendor.received("datadog")
        for metric in ("recipe.tokens", "recipe.duration"):
            got = _temporalities(text, run_id, metric)
            assert got and set(got) == {"Delta"}, (metric, got)
        _assert_no_secret(agent.logged())


def test_prometheus_3_receives_otlp_straight_and_a_run_is_picked_without_promotion(tmp_path, monkeypatch, spool_env):
    """Recipe "an existing Prometheus 3": started with ``--web.enable-otlp-receiver`` and nothing
    else (no ``otlp:`` block: no promoted resource attributes); the processes send metrics over
    OTLP/HTTP to /api/v1/otlp/v1/metrics; the run is picked by its ``verl_run_id``, which every
    series carries from the points (``point_identity``)."""
    prometheus = _binary("prometheus")
    port = free_ports(["prometheus"])["prometheus"]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global: {}\n")
    proc = _start(
        [
            prometheus,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-otlp-receiver",
        ],
        tmp_path / "prometheus.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        poll_until("Prometheus ready", lambda: _answers(f"{url}/-/ready"), 60, 0.2)
        run_id = _send_pipeline(
            monkeypatch,
            {
                **spool_env,
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{url}/api/v1/otlp/v1/metrics",
            },
        )
        other = _send_pipeline(  # a second run in the same Prometheus: the pick must tell them apart
            monkeypatch,
            {
                **spool_env,
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{url}/api/v1/otlp/v1/metrics",
            },
        )
        # the query of docs/recipes.md, "Picking a run without promotion"
        picked = f'verl_training_step{{verl_run_id="{run_id}"}}'

        def query(expr: str) -> list:
            body = get_json(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
            return body["data"]["result"]

        result = poll_until("the run's step by its run id", lambda: query(picked), 30, 0.3)
        got = [(r["metric"]["verl_run_id"], r["metric"]["verl_experiment"], r["value"][1]) for r in result]
        assert got == [(run_id, "exp", "2")], result
        # no promotion (the resource attributes are in target_info only), yet every series carries
        # its run's identity: from the points
        assert {r["metric"]["verl_run_id"] for r in query("target_info")} >= {run_id, other}
        assert {r["metric"].get("verl_run_id") for r in query("verl_training_step")} == {run_id, other}
    finally:
        _stop(proc)
