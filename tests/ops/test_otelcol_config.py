"""collector/otelcol-config.yaml: structure, component names, routing."""

from __future__ import annotations

import copy
import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
from support.opskit import (
    BACKENDS_HOW,
    BUILDER_CONFIG,
    COMPOSE_FILE,
    OTELCOL_CONFIG,
    OTELCOL_REMOTE,
    backends_dir,
    compose_otelcol_env,
    expand_env_defaults,
    load_otelcol_config,
    load_yaml,
    merge_configs,
    poll_until,
    require,
    require_backend_build,
    run_tool,
)
from support.tls import ca_and_server
from verl_cpu_harness.ports import free_ports

# Component types of otelcol-contrib 0.159.0 that this kit may use, by
# kind. From distributions/otelcol-contrib/manifest.yaml in
# open-telemetry/opentelemetry-collector-releases (2026-08-20) and each
# component's metadata.yaml `type`. A subset on purpose: adding a component
# to the config means adding it here after checking that it is current.
ALLOWED_TYPES = {
    "receivers": {"otlp", "prometheus", "filelog", "hostmetrics", "nop"},
    "processors": {
        "memory_limiter",
        "batch",
        "resource",
        "transform",
        "attributes",
        "filter",
        "resourcedetection",
        "tail_sampling",
        "probabilistic_sampler",
        "cumulativetodelta",
        "deltatocumulative",
        "groupbyattrs",
    },
    "exporters": {
        "otlp_grpc",
        "otlp_http",
        "debug",
        "nop",
        "prometheus",
        "prometheusremotewrite",
        "file",
        "load_balancing",  # renamed from loadbalancing (a deprecated alias now)
    },
    "connectors": {"spanmetrics", "servicegraph", "forward", "count", "routing"},
    "extensions": {"health_check", "file_storage", "pprof", "zpages", "basicauth", "bearertokenauth"},
}

# Names that still load (deprecated alias) or that are gone; the config must
# use the current name.
DEPRECATED_OR_REMOVED = {
    (
        "exporters",
        "loki",
    ): "deprecated (contrib#33916) and no longer in otelcol-contrib: use otlp_http to http://loki:3100/otlp",
    ("exporters", "otlp"): "renamed to otlp_grpc in v0.144.0 (deprecated alias)",
    ("exporters", "otlphttp"): "renamed to otlp_http in v0.144.0 (deprecated alias)",
    ("exporters", "logging"): "removed: use debug",
    ("processors", "spanmetrics"): "removed: use the spanmetrics connector",
    ("exporters", "loadbalancing"): "renamed to load_balancing (deprecated alias)",
}

KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")


# What `otel-verl stack up` sets (otel_verl/stack/render.py), with ports of its defaults.
STACK_LIKE_ENV = {
    "OTELCOL_LISTEN_HOST": "127.0.0.1",
    "OTELCOL_OTLP_GRPC_PORT": "4317",
    "OTELCOL_OTLP_HTTP_PORT": "4318",
    "OTELCOL_HEALTH_PORT": "13133",
    "OTELCOL_METRICS_PORT": "8888",
    "OTELCOL_STORAGE_DIR": "/tmp/otel-verl-stack/otelcol",
    "OTELCOL_METRICS_ENDPOINT": "http://127.0.0.1:9090/api/v1/otlp",
    "OTELCOL_TRACES_ENDPOINT": "127.0.0.1:14317",
    "OTELCOL_LOGS_ENDPOINT": "http://127.0.0.1:9428/insert/opentelemetry",
}


def test_stack_env_only_changes_addresses_and_paths(cfg):
    stack = load_otelcol_config(STACK_LIKE_ENV)
    assert stack["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "127.0.0.1:4317"
    assert stack["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]["port"] == 8888
    assert cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]["port"] == 8888
    assert stack["exporters"]["otlp_grpc/tempo"]["endpoint"] == "127.0.0.1:14317"
    # Nothing but addresses and paths differs between compose and stack up.
    assert stack["service"] == {**cfg["service"], "telemetry": stack["service"]["telemetry"]}
    assert stack["processors"] == cfg["processors"]


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def check_collector_config(cfg: dict) -> list[str]:
    """Return a list of problems (empty when the config is consistent)."""
    problems: list[str] = []
    defined = {kind: set((cfg.get(kind) or {}).keys()) for kind in KINDS}

    for kind in KINDS:
        for cid in defined[kind]:
            ctype = component_type(cid)
            if (kind, ctype) in DEPRECATED_OR_REMOVED:
                problems.append(f"{kind}.{cid}: {DEPRECATED_OR_REMOVED[(kind, ctype)]}")
            elif ctype not in ALLOWED_TYPES[kind]:
                problems.append(f"{kind}.{cid}: type {ctype!r} is not in the allow-list of current components")

    service = cfg.get("service") or {}
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        problems.append("service.pipelines is empty")
    used = {kind: set() for kind in KINDS}
    for pname, p in pipelines.items():
        signal = component_type(pname)
        if signal not in ("traces", "metrics", "logs", "profiles"):
            problems.append(f"pipeline {pname}: unknown signal {signal!r}")
        if not p.get("receivers"):
            problems.append(f"pipeline {pname}: no receivers")
        if not p.get("exporters"):
            problems.append(f"pipeline {pname}: no exporters")
        for r in p.get("receivers") or []:
            if r in defined["receivers"]:
                used["receivers"].add(r)
            elif r in defined["connectors"]:
                used["connectors"].add(r)
            else:
                problems.append(f"pipeline {pname}: receiver {r!r} is not defined")
        for pr in p.get("processors") or []:
            if pr in defined["processors"]:
                used["processors"].add(pr)
            else:
                problems.append(f"pipeline {pname}: processor {pr!r} is not defined")
        for e in p.get("exporters") or []:
            if e in defined["exporters"]:
                used["exporters"].add(e)
            elif e in defined["connectors"]:
                used["connectors"].add(e)
            else:
                problems.append(f"pipeline {pname}: exporter {e!r} is not defined")
        procs = p.get("processors") or []
        if procs and component_type(procs[0]) != "memory_limiter":
            problems.append(f"pipeline {pname}: memory_limiter must be the first processor, got {procs[0]!r}")
        if not procs or "memory_limiter" not in map(component_type, procs):
            problems.append(f"pipeline {pname}: no memory_limiter")

    # A connector must be an exporter in one pipeline and a receiver in another.
    for c in defined["connectors"]:
        as_exp = any(c in (p.get("exporters") or []) for p in pipelines.values())
        as_rcv = any(c in (p.get("receivers") or []) for p in pipelines.values())
        if not (as_exp and as_rcv):
            problems.append(f"connector {c!r} must be used as exporter and as receiver")

    enabled_ext = list(service.get("extensions") or [])
    for e in enabled_ext:
        if e not in defined["extensions"]:
            problems.append(f"service.extensions: {e!r} is not defined")
    # Extensions referenced from component settings (persistent queues).
    for kind in ("exporters", "receivers"):
        for cid, ccfg in (cfg.get(kind) or {}).items():
            storage = ((ccfg or {}).get("sending_queue") or {}).get("storage")
            if storage is not None:
                if storage not in defined["extensions"]:
                    problems.append(f"{kind}.{cid}: sending_queue.storage {storage!r} is not a defined extension")
                elif storage not in enabled_ext:
                    problems.append(f"{kind}.{cid}: extension {storage!r} is not enabled in service.extensions")

    # Defined but unused components are dead configuration.
    for kind in ("receivers", "processors", "exporters"):
        for cid in defined[kind] - used[kind]:
            problems.append(f"{kind}.{cid} is defined but not used in any pipeline")
    for e in defined["extensions"] - set(enabled_ext):
        problems.append(f"extensions.{e} is defined but not enabled")
    return problems


@pytest.fixture(scope="module")
def cfg():
    return load_otelcol_config()


def test_config_is_consistent(cfg):
    assert check_collector_config(cfg) == []


def test_checker_catches_broken_configs(cfg):
    # Undefined exporter in a pipeline.
    broken = copy.deepcopy(cfg)
    broken["service"]["pipelines"]["logs"]["exporters"] = ["otlp_http/missing"]
    assert any("'otlp_http/missing' is not defined" in p for p in check_collector_config(broken))
    # The deprecated loki exporter is rejected.
    broken = copy.deepcopy(cfg)
    broken["exporters"]["loki"] = {"endpoint": "http://loki:3100/loki/api/v1/push"}
    broken["service"]["pipelines"]["logs"]["exporters"] = ["loki"]
    assert any(p.startswith("exporters.loki: deprecated") for p in check_collector_config(broken))
    # Old otlphttp alias is rejected.
    broken = copy.deepcopy(cfg)
    broken["exporters"]["otlphttp/x"] = broken["exporters"].pop("otlp_http/loki")
    broken["service"]["pipelines"]["logs"]["exporters"] = ["otlphttp/x"]
    assert any("renamed to otlp_http" in p for p in check_collector_config(broken))
    # memory_limiter not first.
    broken = copy.deepcopy(cfg)
    broken["processors"]["resource"] = {"attributes": []}
    broken["service"]["pipelines"]["traces"]["processors"] = ["resource", "memory_limiter"]
    assert any("must be the first processor" in p for p in check_collector_config(broken))
    # Persistent queue pointing at an extension that is not enabled.
    broken = copy.deepcopy(cfg)
    broken["service"]["extensions"] = ["health_check"]
    problems = check_collector_config(broken)
    assert any("is not enabled in service.extensions" in p for p in problems)
    # Unknown component type.
    broken = copy.deepcopy(cfg)
    broken["receivers"]["opencensus"] = {}
    broken["service"]["pipelines"]["traces"]["receivers"].append("opencensus")
    assert any("not in the allow-list" in p for p in check_collector_config(broken))


def test_no_loki_exporter_and_current_exporter_names(cfg):
    types = {component_type(e) for e in cfg["exporters"]}
    assert "loki" not in types
    assert types <= {"otlp_grpc", "otlp_http"}


def test_receivers_listen_on_standard_ports(cfg):
    protocols = load_otelcol_config(compose_otelcol_env())["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"  # inside compose's container
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


def _listen_hosts(cfg: dict) -> list[str]:
    protocols = cfg["receivers"]["otlp"]["protocols"]
    prometheus = cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    return [
        protocols["grpc"]["endpoint"].rsplit(":", 1)[0],
        protocols["http"]["endpoint"].rsplit(":", 1)[0],
        cfg["extensions"]["health_check"]["endpoint"].rsplit(":", 1)[0],
        prometheus["host"],
    ]


def test_the_file_as_it_is_listens_on_this_host_only(cfg):
    """``otelcol-verl --config=otelcol-config.yaml`` with nothing set must not listen on every interface."""
    assert _listen_hosts(cfg) == ["127.0.0.1"] * 4
    defaults = re.findall(r"\$\{env:OTELCOL_LISTEN_HOST:-([^}]*)\}", OTELCOL_CONFIG.read_text())
    assert len(defaults) == 4 and set(defaults) == {"127.0.0.1"}
    assert compose_otelcol_env()["OTELCOL_LISTEN_HOST"] == "0.0.0.0"  # compose sets its container's itself
    assert _listen_hosts(load_otelcol_config(compose_otelcol_env())) == ["0.0.0.0"] * 4


# What otelcol-remote.yaml needs: the files exist only on the machine that runs it.
REMOTE_ENV = {
    "OTELCOL_TLS_CERT_FILE": "/etc/otelcol/tls/cert.pem",
    "OTELCOL_TLS_KEY_FILE": "/etc/otelcol/tls/key.pem",
    "OTELCOL_BEARER_TOKEN_FILE": "/etc/otelcol/token",
}


def test_the_remote_overlay_puts_tls_and_a_bearer_token_on_both_receivers(cfg):
    remote = merge_configs(cfg, expand_env_defaults(load_yaml(OTELCOL_REMOTE), REMOTE_ENV))
    assert check_collector_config(remote) == []
    (auth,) = [e for e in remote["extensions"] if component_type(e) == "bearertokenauth"]
    assert remote["extensions"][auth] == {"filename": "/etc/otelcol/token"}
    assert set(cfg["service"]["extensions"]) < set(remote["service"]["extensions"])  # the base list, repeated
    for name, protocol in remote["receivers"]["otlp"]["protocols"].items():
        assert protocol["auth"] == {"authenticator": auth}, name
        assert protocol["tls"]["cert_file"] == REMOTE_ENV["OTELCOL_TLS_CERT_FILE"], name
        assert protocol["tls"]["key_file"] == REMOTE_ENV["OTELCOL_TLS_KEY_FILE"], name
        assert protocol["endpoint"].startswith("0.0.0.0:"), name
    # only the receivers are for other nodes: health check and self-metrics stay on this host
    assert _listen_hosts(remote)[2:] == ["127.0.0.1", "127.0.0.1"]
    # the overlay has no defaults for the files: a Collector without them must not start
    with pytest.raises(AssertionError, match="has no default"):
        expand_env_defaults(load_yaml(OTELCOL_REMOTE))


def _contrib_version(gomod: str) -> str:
    return gomod.rsplit(" ", 1)[1]


# Contrib modules the Go module proxy does not serve at the others' release (builder-config.yaml
# says why): the only ones allowed at another release, and only at this one.
CONTRIB_BEHIND = {
    "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/loadbalancingexporter": "v0.160.0",
    "github.com/open-telemetry/opentelemetry-collector-contrib/processor/resourcedetectionprocessor": "v0.160.0",
}


def test_the_built_collector_has_the_auth_extension_at_the_contrib_release():
    builder = load_yaml(BUILDER_CONFIG)
    modules = [m["gomod"] for kind in ("receivers", "processors", "exporters", "extensions") for m in builder[kind]]
    contrib = [m for m in modules if m.startswith("github.com/open-telemetry/opentelemetry-collector-contrib/")]
    (auth,) = [m for m in contrib if "/extension/bearertokenauthextension " in m]
    behind = {m.split(" ")[0]: _contrib_version(m) for m in contrib if m.split(" ")[0] in CONTRIB_BEHIND}
    assert behind == CONTRIB_BEHIND, behind  # the two are in, at the release the comment names
    others = [m for m in contrib if m.split(" ")[0] not in CONTRIB_BEHIND]
    assert {_contrib_version(m) for m in others} == {_contrib_version(auth)}  # one contrib release


def test_signal_routing(cfg):
    pipes = cfg["service"]["pipelines"]
    exps = cfg["exporters"]

    (m,) = pipes["metrics"]["exporters"]
    assert component_type(m) == "otlp_http"
    assert exps[m]["endpoint"] == "http://prometheus:9090/api/v1/otlp"

    (t,) = pipes["traces"]["exporters"]
    assert component_type(t) == "otlp_grpc"
    assert exps[t]["endpoint"] == "tempo:4317"
    assert exps[t]["tls"]["insecure"] is True

    (lg,) = pipes["logs"]["exporters"]
    assert component_type(lg) == "otlp_http"
    assert exps[lg]["endpoint"] == "http://loki:3100/otlp"


def test_every_exporter_retries_and_queues_on_disk(cfg):
    storage_ids = [e for e in cfg["extensions"] if component_type(e) == "file_storage"]
    assert storage_ids, "a file_storage extension is needed for persistent queues"
    for name, exp in cfg["exporters"].items():
        retry = exp["retry_on_failure"]
        assert retry["enabled"] is True, name
        q = exp["sending_queue"]
        assert q.get("enabled", True) is True, name
        assert q["storage"] in storage_ids, name
        # Batching lives in the exporter queue, not in a batch processor.
        b = q["batch"]
        assert b["sizer"] in ("items", "bytes"), name
        assert b["flush_timeout"], name
        if b.get("max_size"):
            assert b["max_size"] >= b["min_size"], name
        if q.get("sizer", "requests") == b["sizer"]:
            assert b["min_size"] <= q["queue_size"], name
        # wait_for_result is not supported with a persistent queue.
        assert not q.get("wait_for_result", False), name


def test_no_batch_processor(cfg):
    types = {component_type(p) for p in cfg.get("processors") or {}}
    assert "batch" not in types


def test_health_check_enabled(cfg):
    assert "health_check" in cfg["service"]["extensions"]
    assert cfg["extensions"]["health_check"]["endpoint"].endswith(":13133")


def test_compose_mounts_this_config_and_queue_directory(cfg):
    compose = load_yaml(COMPOSE_FILE)
    svc = compose["services"]["otelcol"]
    cmd = " ".join(svc["command"])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    config_in_container = cmd.split("--config=")[1].split()[0]
    assert mounts[config_in_container] == "./otelcol-config.yaml"
    storage_dir = cfg["extensions"]["file_storage/queue"]["directory"]
    assert storage_dir in mounts and not mounts[storage_dir].startswith("."), (
        "the persistent queue directory must be a named volume"
    )


def _collector_binary() -> str:
    """otelcol-contrib, or the Collector scripts/backends.sh builds (otelcol-verl); else ``require``."""
    for name in ("otelcol-verl", "otelcol-contrib"):
        if found := shutil.which(name):
            return found
    require_backend_build()  # setup.sh may still be building it in the background
    built = backends_dir() / "otelcol-verl"
    if not built.is_file():
        require(
            "a Collector binary",
            f"neither otelcol-contrib nor otelcol-verl is on PATH or in {built.parent}; {BACKENDS_HOW}",
        )
    return str(built)


@pytest.mark.live_stack  # runs last: the Collector binary may still be building
def test_otelcol_validate():
    binary = _collector_binary()
    # With the file's defaults, compose's variables, and the addresses `otel-verl stack up` sets.
    for env in ({}, compose_otelcol_env(), STACK_LIKE_ENV):
        res = run_tool([binary, "validate", f"--config={OTELCOL_CONFIG}"], env=env)
        assert res.returncode == 0, (env, res.stdout + res.stderr)


def _collector_with_bearertokenauth() -> str:
    binary = _collector_binary()
    if "bearertokenauth" not in run_tool([binary, "components"]).stdout:
        require(
            "a Collector with bearertokenauth",
            f"{binary} predates bearertokenauth in builder-config.yaml: `bash scripts/backends.sh otelcol-verl`",
        )
    return binary


@pytest.mark.live_stack
def test_otelcol_validates_the_remote_overlay_and_refuses_it_without_its_files():
    binary = _collector_with_bearertokenauth()
    both = [f"--config={OTELCOL_CONFIG}", f"--config={OTELCOL_REMOTE}"]
    res = run_tool([binary, "validate", *both], env=REMOTE_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    unset = {name: "" for name in REMOTE_ENV}
    res = run_tool([binary, "validate", *both], env=unset)
    assert res.returncode != 0
    assert "certificate and key" in res.stderr and "no bearer token" in res.stderr, res.stderr


def _status(method: str, url: str, token: str | None, ca: str | None) -> int:
    """The HTTP status of an (empty OTLP/JSON) request, or -1 when no HTTP answer came."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = b"{}" if method == "POST" else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return -1


@pytest.mark.live_stack
def test_a_remote_collector_takes_otlp_only_over_tls_with_the_token(tmp_path, monkeypatch):
    """The overlay, run: both receivers refuse a request without the token or in clear, the SDK's
    own OTLP/gRPC exporter gets through with the documented OTEL_EXPORTER_OTLP_* variables."""
    binary = _collector_with_bearertokenauth()
    tls = ca_and_server(tmp_path, ["localhost"], ["127.0.0.1", "::1"])
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    ports = free_ports(["grpc", "http", "health", "metrics"])
    env = {
        "OTELCOL_TLS_CERT_FILE": str(tls["cert"]),
        "OTELCOL_TLS_KEY_FILE": str(tls["key"]),
        "OTELCOL_BEARER_TOKEN_FILE": str(token),
        "OTELCOL_REMOTE_LISTEN_HOST": "127.0.0.1",  # a test: this host only
        "OTELCOL_OTLP_GRPC_PORT": str(ports["grpc"]),
        "OTELCOL_OTLP_HTTP_PORT": str(ports["http"]),
        "OTELCOL_HEALTH_PORT": str(ports["health"]),
        "OTELCOL_METRICS_PORT": str(ports["metrics"]),
        "OTELCOL_STORAGE_DIR": str(tmp_path / "queue"),
        # no backends: what is accepted waits in the queue, which is all this test looks at
        "OTELCOL_METRICS_ENDPOINT": "http://127.0.0.1:9/api/v1/otlp",
        "OTELCOL_TRACES_ENDPOINT": "127.0.0.1:9",
        "OTELCOL_LOGS_ENDPOINT": "http://127.0.0.1:9/otlp",
    }
    proc = subprocess.Popen(
        [binary, f"--config={OTELCOL_CONFIG}", f"--config={OTELCOL_REMOTE}"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "otelcol.log", "wb"),  # noqa: SIM115 - closed with the process
    )
    try:
        health = f"http://127.0.0.1:{ports['health']}/"
        poll_until("the Collector's health check", lambda: _status("GET", health, None, None) == 200, 60, 0.2)
        https = f"https://localhost:{ports['http']}/v1/traces"
        ca = str(tls["ca"])
        assert _status("POST", https, None, ca) == 401
        assert _status("POST", https, "wrong", ca) == 401
        assert _status("POST", https, "s3cret-token", ca) == 200
        plain = f"http://localhost:{ports['http']}/v1/traces"
        assert _status("POST", plain, "s3cret-token", None) == 400  # Go's answer to HTTP on a TLS port

        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://localhost:{ports['grpc']}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tls["ca"]))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        results = {}
        for case, headers in (("token", "authorization=Bearer%20s3cret-token"), ("no token", None)):
            if headers:
                monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
            else:
                monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
            exporter, spans = OTLPSpanExporter(), InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            provider.get_tracer("t").start_span("verl.step").end()
            results[case] = exporter.export(spans.get_finished_spans())
            exporter.shutdown()
        assert results == {"token": SpanExportResult.SUCCESS, "no token": SpanExportResult.FAILURE}
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.live_stack
def test_a_gateway_on_an_ipv6_address_listens_there_and_takes_the_token_file_as_the_headers_file(tmp_path, monkeypatch):
    """``otel-verl stack up --role gateway --bind ::1`` with TLS: the receivers listen on ``[::1]``,
    and a verl process whose ``OTEL_VERL_OTLP_HEADERS_FILE`` is the stack's ``--token-file`` (the
    token alone) gets through over OTLP/gRPC; without the file it is refused."""
    from pathlib import Path

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_verl import config, stack
    from otel_verl.process import exporters, otlp_headers
    from otel_verl.process.resource import Identity

    binary = _collector_with_bearertokenauth()
    tls = ca_and_server(tmp_path, ["localhost"], ["127.0.0.1", "::1"])
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    ports = free_ports(["otlp-grpc", "otlp-http", "otelcol-health", "otelcol-metrics"])
    setup = stack.roles.CollectorSetup(
        role="gateway", bind="::1", tls_cert=tls["cert"], tls_key=tls["key"], token_file=token
    )
    for name in ("OTELCOL_METRICS_ENDPOINT", "OTELCOL_TRACES_ENDPOINT", "OTELCOL_LOGS_ENDPOINT"):
        monkeypatch.setenv(name, "127.0.0.1:9" if name == "OTELCOL_TRACES_ENDPOINT" else "http://127.0.0.1:9/x")
    data = tmp_path / "data"
    items = [f"{name}={port}" for name, port in ports.items()]
    assert (
        stack.supervisor.up(
            Path(binary).parent, data, stack.ports.parse_ports(items), 60, setup=setup, out=lambda _: None
        )
        == 0
    )
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://[::1]:{ports['otlp-grpc']}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tls["ca"]))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        monkeypatch.setenv("OTEL_VERL_SPOOL", "off")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
        results = {}
        for case, headers_file in (("token file", str(token)), ("no file", None)):
            if headers_file:
                monkeypatch.setenv(config.OTLP_HEADERS_FILE, headers_file)
            else:
                monkeypatch.delenv(config.OTLP_HEADERS_FILE, raising=False)
            config.settings.cache_clear()
            otlp_headers.file_headers.cache_clear()
            exporter = exporters.make_exporter("otlp_proto_grpc", OTLPSpanExporter, "traces", Identity())
            spans = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            provider.get_tracer("t").start_span("verl.step").end()
            results[case] = exporter.export(spans.get_finished_spans())
            exporter.shutdown()
        assert results == {"token file": SpanExportResult.SUCCESS, "no file": SpanExportResult.FAILURE}
    finally:
        stack.supervisor.down(data, out=lambda _: None)
        config.settings.cache_clear()
        otlp_headers.file_headers.cache_clear()
