"""The agent and gateway Collectors of a multi-node job and ``otel-verl stack --role``, checked
without running them (the built Collector validates them where it is there; the real multi-host
run: tests/e2e/test_multihost.py)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from ops.test_otelcol_config import _collector_binary, check_collector_config, component_type
from support.opskit import (
    BUILDER_CONFIG,
    COLLECTOR,
    OTELCOL_AGENT,
    OTELCOL_CONFIG,
    OTELCOL_DEBUG,
    OTELCOL_REMOTE,
    expand_env_defaults,
    load_otelcol_config,
    load_yaml,
    merge_configs,
    run_tool,
)

from otel_verl import cli, stack
from otel_verl.exits import USAGE, CommandError

STATIC = {"static": {"hostnames": ["gw1:4317", "gw2:4317"]}}
DNS = {"dns": {"hostname": "gateways.example", "port": "4317", "interval": "5s"}}
AGENT_ENV = {"OTELCOL_BEARER_TOKEN_FILE": "/etc/otelcol/token", "OTELCOL_GATEWAY_RESOLVER": json.dumps(STATIC)}
REMOTE_ENV = {"OTELCOL_TLS_CERT_FILE": "/etc/otelcol/cert.pem", "OTELCOL_TLS_KEY_FILE": "/etc/otelcol/key.pem"}


def _agent(env: dict[str, str] | None = None) -> dict:
    return expand_env_defaults(load_yaml(OTELCOL_AGENT), {**AGENT_ENV, **(env or {})})


def test_the_agent_config_is_consistent_and_only_forwards():
    agent = _agent()
    assert check_collector_config(agent) == []
    for name, pipe in agent["service"]["pipelines"].items():
        assert pipe["processors"] == ["memory_limiter", "resourcedetection/host"], name
        (exporter,) = pipe["exporters"]
        assert component_type(exporter) == "load_balancing", name
    # the node's own host, unless the sender says
    detection = agent["processors"]["resourcedetection/host"]
    assert detection["detectors"] == ["system"] and detection["override"] is False
    # processes talk to localhost: nothing listens beyond this host
    assert agent["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "127.0.0.1:4317"
    assert agent["extensions"]["health_check"]["endpoint"].startswith("127.0.0.1:")


def test_each_signal_is_routed_so_that_what_belongs_together_meets_in_one_gateway():
    exporters = _agent()["exporters"]
    pipes = _agent()["service"]["pipelines"]
    keys = {signal: exporters[pipe["exporters"][0]]["routing_key"] for signal, pipe in pipes.items()}
    assert keys == {"traces": "traceID", "logs": "traceID", "metrics": "resource"}


@pytest.mark.parametrize("resolver", [STATIC, DNS], ids=["static", "dns"])
def test_the_resolver_comes_from_one_variable(resolver):
    agent = _agent({"OTELCOL_GATEWAY_RESOLVER": json.dumps(resolver)})
    for exporter in agent["exporters"].values():
        assert exporter["resolver"] == resolver


def test_the_agent_queues_on_disk_at_the_top_and_its_gateway_exporters_neither_queue_nor_retry():
    """A failed send must come back to the load_balancing exporter: its persistent queue holds it and
    its retry routes it again with the current gateways (the exporter's README, "Resilience")."""
    agent = _agent()
    for name, exporter in agent["exporters"].items():
        queue = exporter["sending_queue"]
        assert queue["enabled"] is True and queue["storage"] == "file_storage/queue", name
        assert exporter["retry_on_failure"]["enabled"] is True, name
        assert exporter["retry_on_failure"]["max_elapsed_time"] == "30m", name
        otlp = exporter["protocol"]["otlp"]
        assert otlp["sending_queue"] == {"enabled": False}, name
        assert otlp["retry_on_failure"] == {"enabled": False}, name
        # TLS with the token to every gateway
        assert otlp["auth"] == {"authenticator": "bearertokenauth/otlp"}, name
        assert "insecure" not in otlp["tls"] and not otlp["tls"]["ca_file"], name  # the system CAs by default
        assert "endpoint" not in otlp, name  # the exporter sets each gateway's


def test_the_agent_has_no_token_default():
    with pytest.raises(AssertionError, match="OTELCOL_BEARER_TOKEN_FILE.*has no default"):
        expand_env_defaults(load_yaml(OTELCOL_AGENT), {"OTELCOL_GATEWAY_RESOLVER": json.dumps(STATIC)})


def test_a_secured_agent_takes_tls_and_the_same_token_on_localhost():
    secured = merge_configs(_agent(), expand_env_defaults(load_yaml(OTELCOL_REMOTE), {**AGENT_ENV, **REMOTE_ENV}))
    assert check_collector_config(secured) == []
    for protocol in secured["receivers"]["otlp"]["protocols"].values():
        assert protocol["auth"] == {"authenticator": "bearertokenauth/otlp"}
        assert protocol["tls"]["cert_file"] == REMOTE_ENV["OTELCOL_TLS_CERT_FILE"]
    assert secured["service"]["extensions"] == _agent()["service"]["extensions"]


def test_the_debug_overlay_adds_a_line_per_span_beside_the_traces_backend():
    base = load_otelcol_config()
    debug = merge_configs(base, expand_env_defaults(load_yaml(OTELCOL_DEBUG)))
    assert check_collector_config(debug) == []
    assert debug["service"]["pipelines"]["traces"]["exporters"] == [
        *base["service"]["pipelines"]["traces"]["exporters"],
        "debug/spans",
    ]
    assert debug["exporters"]["debug/spans"]["verbosity"] == "normal"


def test_the_builder_has_every_component_the_new_configs_use():
    builder = load_yaml(BUILDER_CONFIG)
    modules = " ".join(m["gomod"] for kind in ("processors", "exporters") for m in builder[kind])
    for module in ("loadbalancingexporter", "resourcedetectionprocessor", "exporter/debugexporter"):
        assert f"/{module} " in modules, module


@pytest.mark.live_stack  # runs last: the Collector binary may still be building
def test_the_built_collector_validates_the_agent_gateway_and_debug_configs():
    binary = _collector_binary()
    listed = run_tool([binary, "components"]).stdout
    for name in ("load_balancing", "resource_detection", "debug", "bearertokenauth"):
        if f"name: {name}\n" not in listed:
            pytest.fail(f"{binary} lacks {name}: `bash scripts/backends.sh otelcol-verl` builds builder-config.yaml")
    gateway = [f"--config={OTELCOL_CONFIG}", f"--config={OTELCOL_REMOTE}", f"--config={OTELCOL_DEBUG}"]
    agent = [f"--config={OTELCOL_AGENT}"]
    for resolver in (STATIC, DNS):
        env = {**AGENT_ENV, **REMOTE_ENV, "OTELCOL_GATEWAY_RESOLVER": json.dumps(resolver)}
        for argv in (agent, [*agent, f"--config={OTELCOL_REMOTE}"], gateway):
            res = run_tool([binary, "validate", *argv], env=env)
            assert res.returncode == 0, (argv, res.stdout + res.stderr)


# ---------------------------------------------------------------------------------------------
# otel-verl stack --role


def _fake_binaries(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for names in stack.binaries.BINARY_NAMES.values():
        exe = folder / names[0]
        exe.write_text("#!/bin/sh\necho 'prometheus, version 3.16.0 (branch: x)'\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    out = {}
    for name in ("cert", "key", "token", "ca"):
        out[name] = tmp_path / f"{name}.pem"
        out[name].write_text(name)
    return out


def _plan(
    tmp_path, setup: stack.roles.CollectorSetup, ports: dict[str, int] | None = None
) -> dict[str, stack.render.Component]:
    stack.roles.check_setup(setup)
    binaries = stack.binaries.find_binaries(_fake_binaries(tmp_path / "bin"), stack.roles.role_components(setup.role))
    comps = stack.render.plan(binaries, COLLECTOR, tmp_path / "data", ports or dict(stack.ports.DEFAULT_PORTS), setup)
    return {c.name: c for c in comps}


def _configs(comp: stack.render.Component) -> list[str]:
    return [Path(a.split("=", 1)[1]).name for a in comp.argv[1:]]


def test_an_agent_is_one_collector_forwarding_to_the_gateways(tmp_path, files):
    setup = stack.roles.CollectorSetup(
        role="agent",
        gateways="gw1:4317, 10.0.0.6:4317,[fd00::7]:4317",
        token_file=files["token"],
        gateway_ca=files["ca"],
    )
    comps = _plan(tmp_path, setup)
    assert list(comps) == ["otelcol"]
    otelcol = comps["otelcol"]
    assert _configs(otelcol) == ["otelcol-agent.yaml"]
    env = otelcol.env
    assert json.loads(env["OTELCOL_GATEWAY_RESOLVER"]) == {
        "static": {"hostnames": ["gw1:4317", "10.0.0.6:4317", "[fd00::7]:4317"]}
    }
    assert env["OTELCOL_BEARER_TOKEN_FILE"] == str(files["token"].resolve())
    assert env["OTELCOL_GATEWAY_CA_FILE"] == str(files["ca"].resolve())
    assert env["OTELCOL_LISTEN_HOST"] == "127.0.0.1" and "OTELCOL_METRICS_ENDPOINT" not in env
    # the agent's config as the Collector reads it with this environment
    agent = expand_env_defaults(load_yaml(OTELCOL_AGENT), env)
    assert agent["exporters"]["load_balancing/traces"]["resolver"]["static"]["hostnames"][2] == "[fd00::7]:4317"


def test_an_agent_of_a_dns_name_follows_its_addresses(tmp_path, files):
    comps = _plan(
        tmp_path, stack.roles.CollectorSetup(role="agent", gateways="dns:gateways:4317", token_file=files["token"])
    )
    env = comps["otelcol"].env
    assert json.loads(env["OTELCOL_GATEWAY_RESOLVER"]) == {
        "dns": {"hostname": "gateways", "port": "4317", "interval": stack.roles.DNS_INTERVAL}
    }
    assert env["OTELCOL_GATEWAY_CA_FILE"] == ""  # the system's CAs


def test_a_secured_agent_adds_the_remote_overlay_on_loopback(tmp_path, files):
    setup = stack.roles.CollectorSetup(
        role="agent",
        gateways="gw:4317",
        token_file=files["token"],
        tls_cert=files["cert"],
        tls_key=files["key"],
    )
    otelcol = _plan(tmp_path, setup)["otelcol"]
    assert _configs(otelcol) == ["otelcol-agent.yaml", "otelcol-remote.yaml"]
    assert otelcol.env["OTELCOL_REMOTE_LISTEN_HOST"] == "127.0.0.1"
    assert otelcol.url.startswith("https://127.0.0.1:4317")


def test_a_gateway_listens_on_its_address_with_tls_and_exports_to_this_hosts_backends(tmp_path, files, monkeypatch):
    monkeypatch.delenv("OTELCOL_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTELCOL_LOGS_ENDPOINT", "http://loki.internal:3100/otlp")
    ports = stack.ports.parse_ports(["prometheus=19090", "jaeger-otlp-grpc=24317", "otlp-grpc=14000"])
    setup = stack.roles.CollectorSetup(
        role="gateway",
        bind="10.0.0.5",
        tls_cert=files["cert"],
        tls_key=files["key"],
        token_file=files["token"],
        extra_configs=(COLLECTOR / "otelcol-debug.yaml",),
    )
    otelcol = _plan(tmp_path, setup, ports)["otelcol"]
    assert _configs(otelcol) == ["otelcol-config.yaml", "otelcol-remote.yaml", "otelcol-debug.yaml"]
    env = otelcol.env
    assert env["OTELCOL_REMOTE_LISTEN_HOST"] == "10.0.0.5"
    assert env["OTELCOL_LISTEN_HOST"] == "127.0.0.1"  # health check and self-metrics stay on this host
    assert env["OTELCOL_TLS_CERT_FILE"] == str(files["cert"].resolve())
    assert env["OTELCOL_METRICS_ENDPOINT"] == "http://127.0.0.1:19090/api/v1/otlp"
    assert env["OTELCOL_TRACES_ENDPOINT"] == "127.0.0.1:24317"
    assert env["OTELCOL_LOGS_ENDPOINT"] == "http://loki.internal:3100/otlp"  # the environment's backend
    assert otelcol.url.startswith("https://10.0.0.5:14000")


def test_all_in_one_is_unchanged_by_default(tmp_path):
    comps = _plan(tmp_path, stack.roles.CollectorSetup())
    assert list(comps) == list(stack.roles.START_ORDER)
    assert _configs(comps["otelcol"]) == ["otelcol-config.yaml"]
    assert "OTELCOL_REMOTE_LISTEN_HOST" not in comps["otelcol"].env


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"bind": "0.0.0.0"}, "needs --tls-cert, --tls-key and --token-file"),
        ({"bind": "10.0.0.5", "role": "gateway"}, "needs --tls-cert"),
        ({"role": "gateway"}, "--role gateway needs --tls-cert"),
        ({"role": "agent", "token_file": "token"}, "--role agent needs --gateway"),
        ({"role": "agent", "gateways": "gw:4317"}, "needs --token-file"),
        ({"gateways": "gw:4317"}, "options of --role agent"),
        ({"tls_cert": "cert"}, "go together"),
        ({"tls_cert": "cert", "tls_key": "key"}, "needs --token-file"),
        ({"role": "agent", "gateways": "gw", "token_file": "token"}, "expected HOST:PORT"),
        ({"role": "agent", "gateways": "gw:99999", "token_file": "token"}, "expected HOST:PORT"),
        ({"role": "agent", "gateways": "g w:4317", "token_file": "token"}, "expected HOST:PORT"),
        ({"role": "agent", "gateways": "gw:4317\n{x: 1}", "token_file": "token"}, "expected HOST:PORT"),
        ({"role": "agent", "gateways": ",", "token_file": "token"}, "no HOST:PORT"),
        ({"role": "agent", "gateways": "dns:gw", "token_file": "token"}, "expected HOST:PORT"),
        ({"role": "agent", "gateways": "gw:4317", "token_file": "missing"}, "--token-file"),
        ({"bind": "a b"}, "not an address"),
        ({"role": "relay"}, "one of all-in-one"),
    ],
)
def test_options_that_do_not_fit_the_role_are_refused(files, tmp_path, kwargs, message):
    paths = {"cert": files["cert"], "key": files["key"], "token": files["token"], "missing": tmp_path / "no"}
    kwargs = {k: paths.get(v, v) if k.endswith(("_cert", "_key", "_file")) else v for k, v in kwargs.items()}
    with pytest.raises(CommandError, match=message) as exc:
        stack.roles.check_setup(stack.roles.CollectorSetup(**kwargs))
    assert exc.value.code == USAGE


def test_the_cli_takes_the_role_options(tmp_path, files, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path / "none"))
    argv = ["stack", "up", "--role", "agent", "--data-dir", str(tmp_path / "d"), "--gateway", "gw:4317"]
    assert cli.main([*argv, "--token-file", str(files["token"])]) == 1  # passed the checks: no binary here
    err = capsys.readouterr().err
    assert "otelcol-verl" in err and "prometheus" not in err, err  # an agent needs the Collector only
    assert cli.main([*argv]) == USAGE
    assert "--token-file" in capsys.readouterr().err


def _listen_addresses(config: dict) -> dict[str, str]:
    """Every address the Collector of ``config`` listens on: receivers' and extensions' endpoints
    (``HOST:PORT``, Go's form: an IPv6 host in brackets) and its self-metrics reader (``host`` and
    ``port`` apart, joined by the Collector: a bare address)."""
    out = {}
    for kind in ("receivers", "extensions"):
        for name, comp in (config.get(kind) or {}).items():
            for proto, conf in ((comp or {}).get("protocols") or {"": comp}).items():
                if isinstance(conf, dict) and "endpoint" in conf:
                    out[f"{kind}/{name}/{proto}".rstrip("/")] = str(conf["endpoint"])
    for reader in config["service"]["telemetry"]["metrics"]["readers"]:
        prom = reader["pull"]["exporter"]["prometheus"]
        out["self-metrics host"] = str(prom["host"])
    return out


def _go_host_port(endpoint: str) -> tuple[str, int]:
    """``endpoint`` split as Go's net.SplitHostPort does, or AssertionError (its "too many colons")."""
    if endpoint.startswith("["):
        host, sep, port = endpoint[1:].partition("]:")
        assert sep and ":" in host, endpoint
    else:
        host, sep, port = endpoint.partition(":")
        assert sep and ":" not in port, f"{endpoint}: too many colons in address"
    return host, int(port)


@pytest.mark.parametrize("role,bind", [("gateway", "fd00::5"), ("gateway", "::1"), ("agent", "::1")])
def test_an_ipv6_bind_with_tls_is_bracketed_where_the_collector_joins_host_and_port(tmp_path, files, role, bind):
    setup = stack.roles.CollectorSetup(
        role=role,
        bind=bind,
        tls_cert=files["cert"],
        tls_key=files["key"],
        token_file=files["token"],
        gateways="gw:4317" if role == "agent" else None,
    )
    otelcol = _plan(tmp_path, setup)["otelcol"]
    env = {**otelcol.env, **({} if role == "gateway" else AGENT_ENV)}
    base = OTELCOL_CONFIG if role == "gateway" else OTELCOL_AGENT
    config = merge_configs(
        expand_env_defaults(load_yaml(base), env), expand_env_defaults(load_yaml(OTELCOL_REMOTE), env)
    )
    addresses = _listen_addresses(config)
    assert addresses["self-metrics host"] == "127.0.0.1"  # a bare address: the Collector joins it with the port
    del addresses["self-metrics host"]
    hosts = {where: _go_host_port(endpoint)[0] for where, endpoint in addresses.items()}
    assert hosts == {
        "receivers/otlp/grpc": bind,
        "receivers/otlp/http": bind,
        "extensions/health_check": "127.0.0.1",
    }
    assert otelcol.url.startswith(f"https://[{bind}]:4317")
    assert otelcol.ready_url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("bind", ["::1", "0:0:0:0:0:0:0:1"])
def test_an_ipv6_bind_without_tls_is_refused_up_front(bind):
    with pytest.raises(CommandError, match="IPv6 address is taken with --tls-cert") as exc:
        stack.roles.check_setup(stack.roles.CollectorSetup(bind=bind))
    assert exc.value.code == USAGE
    stack.roles.check_setup(stack.roles.CollectorSetup(bind="127.0.0.1"))  # loopback IPv4 and a name as before
    stack.roles.check_setup(stack.roles.CollectorSetup(bind="localhost"))
