"""`otel-verl stack`: what it runs, checked without the binaries (tests/ops/test_stack_live.py runs them)."""

from __future__ import annotations

import glob
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from support.opskit import COLLECTOR, COMPOSE_FILE, load_yaml

from otel_verl import cli, stack
from otel_verl.exits import PROBLEM, USAGE, CommandError


def _fake_binaries(folder: Path) -> Path:
    """Executables with the names stack looks for; `prometheus --version` says 3.x."""
    folder.mkdir(parents=True, exist_ok=True)
    for names in stack.binaries.BINARY_NAMES.values():
        exe = folder / names[0]
        exe.write_text("#!/bin/sh\necho 'prometheus, version 3.16.0 (branch: x)'\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture
def components(tmp_path) -> dict[str, stack.render.Component]:
    binaries = stack.binaries.find_binaries(_fake_binaries(tmp_path / "bin"))
    return {
        c.name: c for c in stack.render.plan(binaries, COLLECTOR, tmp_path / "data", dict(stack.ports.DEFAULT_PORTS))
    }


def test_default_ports_are_the_documented_ones():
    p = stack.ports.DEFAULT_PORTS
    assert (p["otlp-grpc"], p["otlp-http"], p["prometheus"], p["alertmanager"]) == (4317, 4318, 9090, 9093)
    assert (p["jaeger"], p["victorialogs"]) == (16686, 9428)
    assert not {p["jaeger-otlp-grpc"], p["jaeger-otlp-http"]} & {4317, 4318}


def test_ports_override_and_reject_bad_items():
    assert stack.ports.parse_ports(["prometheus=19090"])["prometheus"] == 19090
    for bad in (["prometheus"], ["nope=1"], ["jaeger=0"], ["jaeger=x"], ["jaeger=4317"]):
        with pytest.raises(CommandError) as exc:
            stack.ports.parse_ports(bad)
        assert exc.value.code == USAGE


def test_missing_binaries_are_named_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path / "none"))
    rc = cli.main(["stack", "up", "--bin-dir", str(tmp_path), "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == PROBLEM and err.count("\n") == 1, err
    for name in ("otelcol-verl", "prometheus", "alertmanager", "jaeger", "victoria-logs"):
        assert name in err, err
    assert "otel-verl stack build" in err and "release binary" in err


def test_prometheus_2_is_passed_over(tmp_path, monkeypatch):
    bin_dir = _fake_binaries(tmp_path / "bin")
    (bin_dir / "prometheus").write_text("#!/bin/sh\necho 'prometheus, version 2.42.0 (branch: debian)'\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path / "none"))
    with pytest.raises(CommandError, match=r"prometheus.*Prometheus 2\.x, 3\.x is needed"):
        stack.binaries.find_binaries(bin_dir)


def test_status_and_down_without_a_stack(tmp_path, capsys):
    assert cli.main(["stack", "status", "--data-dir", str(tmp_path)]) == PROBLEM
    assert cli.main(["stack", "down", "--data-dir", str(tmp_path)]) == 0
    assert "no stack" in capsys.readouterr().out


def test_help_states_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["stack", "--help"])
    assert "exit codes: 0 ok" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("action", ["up", "down", "status", "configs", "build"])
def test_each_action_is_a_sub_command_with_its_own_help(action, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["stack", action, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0 and f"usage: otel-verl stack {action}" in text and "exit codes: 0 ok" in text
    assert ("--role" in text) == (action == "up") and ("--force" in text) == (action == "configs")
    assert ("--data-dir" in text) == (action in ("up", "down", "status"))


def test_an_option_of_another_action_is_refused_in_one_line(tmp_path, capsys):
    """`down` takes no `--role`, `configs` no `--data-dir`: each action carries only its own options."""
    assert cli.main(["stack", "down", "--role", "agent", "--data-dir", str(tmp_path)]) == USAGE
    assert cli.main(["stack", "configs", str(tmp_path / "kit"), "--data-dir", str(tmp_path)]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "unrecognized arguments: --role agent" in err, err
    assert not (tmp_path / "kit").exists()


def test_prometheus_runs_with_compose_flags(components):
    compose = load_yaml(COMPOSE_FILE)["services"]["prometheus"]["command"]
    ours = components["prometheus"].argv[1:]

    def flags(argv: list[str]) -> set[str]:  # paths and addresses differ on purpose
        return {
            a for a in argv if not a.startswith(("--config.file=", "--storage.tsdb.path=", "--web.listen-address="))
        }

    assert flags(ours) == flags(compose)
    assert "--web.listen-address=127.0.0.1:9090" in ours


def test_generated_prometheus_config_keeps_everything_but_addresses(components, tmp_path):
    shipped = load_yaml(COLLECTOR / "prometheus" / "prometheus.yml")
    generated = yaml.safe_load((tmp_path / "data" / "prometheus" / "prometheus.yml").read_text())
    for key in ("global", "storage", "otlp"):
        assert generated[key] == shipped[key], key
    (rules,) = generated["rule_files"]
    assert os.path.isabs(rules) and glob.glob(rules) == [
        str(p) for p in sorted((COLLECTOR / "prometheus" / "rules").glob("*.yaml"))
    ]
    targets = [t for job in generated["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    targets += generated["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets and all(t.startswith("127.0.0.1:") for t in targets), targets


def test_generated_alertmanager_config_sends_to_localhost(components, tmp_path):
    text = (tmp_path / "data" / "alertmanager" / "alertmanager.yml").read_text()
    assert "host.docker.internal" not in text and "http://127.0.0.1:5001/verl-alerts" in text
    assert "--cluster.listen-address=" in components["alertmanager"].argv


def test_every_component_binds_loopback_only(components):
    for comp in components.values():
        for arg in comp.argv:
            assert "0.0.0.0" not in arg, (comp.name, arg)
        assert comp.env.get("OTELCOL_LISTEN_HOST", "127.0.0.1") == "127.0.0.1"
        assert comp.env.get("JAEGER_LISTEN_HOST", "127.0.0.1") == "127.0.0.1"
    jaeger = load_yaml(COLLECTOR / "jaeger" / "jaeger.yaml")
    assert jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].startswith(
        "${env:JAEGER_LISTEN_HOST:-127.0.0.1}"
    )


def test_collector_exports_to_the_stack_backends(components):
    env = components["otelcol"].env
    assert env["OTELCOL_TRACES_ENDPOINT"] == "127.0.0.1:14317"
    assert env["OTELCOL_LOGS_ENDPOINT"] == "http://127.0.0.1:9428/insert/opentelemetry"
    assert env["OTELCOL_METRICS_ENDPOINT"] == "http://127.0.0.1:9090/api/v1/otlp"


# ---------------------------------------------------------------- the kit's files: configs, build


def test_the_kit_of_this_clone_is_found_and_is_collector():
    kit = stack.kit.ops_kit()
    assert kit is not None and kit.configs.resolve() == COLLECTOR.resolve()
    assert kit.backends_script.resolve() == (COLLECTOR.parent / "scripts" / "backends.sh").resolve()


def test_the_installed_kit_wins_over_a_clone(tmp_path, monkeypatch):
    """A wheel's otel_verl/_ops_kit is where stack looks first (what pyproject's force-include makes)."""
    package = tmp_path / "site" / "otel_verl"
    (package / "live").mkdir(parents=True)
    (package / "_ops_kit" / "collector").mkdir(parents=True)
    (package / "_ops_kit" / "collector" / "otelcol-config.yaml").write_text("receivers: {}\n")
    monkeypatch.setattr(stack.kit, "__file__", str(package / "stack" / "kit.py"))
    kit = stack.kit.ops_kit()
    assert kit.configs == package / "_ops_kit" / "collector"
    assert kit.backends_script == package / "_ops_kit" / "scripts" / "backends.sh"
    monkeypatch.setattr(stack.kit, "__file__", str(tmp_path / "bare" / "otel_verl" / "stack" / "kit.py"))
    assert stack.kit.ops_kit() is None


def test_configs_writes_every_file_of_the_kit(tmp_path, capsys):
    out = tmp_path / "kit"
    assert cli.main(["stack", "configs", str(out)]) == 0
    wanted = {p.relative_to(COLLECTOR) for p in COLLECTOR.rglob("*") if p.is_file()}
    assert {p.relative_to(out) for p in out.rglob("*") if p.is_file()} == wanted
    for rel in wanted:
        assert (out / rel).read_bytes() == (COLLECTOR / rel).read_bytes(), rel
    assert f"otelcol-contrib --config={out / 'otelcol-config.yaml'}" in capsys.readouterr().out
    assert cli.main(["stack", "configs", str(out)]) == 0  # again: nothing differs
    assert "already there, unchanged" in capsys.readouterr().out


def test_configs_replaces_a_changed_file_only_with_force(tmp_path, capsys):
    out = tmp_path / "kit"
    stack.kit.configs(out, out=lambda _: None)
    mine = out / "prometheus" / "prometheus.yml"
    mine.write_text("# my edits\n")
    assert cli.main(["stack", "configs", str(out)]) == PROBLEM
    assert "prometheus/prometheus.yml" in capsys.readouterr().err and mine.read_text() == "# my edits\n"
    assert cli.main(["stack", "configs", str(out), "--force"]) == 0
    assert mine.read_bytes() == (COLLECTOR / "prometheus" / "prometheus.yml").read_bytes()


def test_configs_never_writes_through_a_link(tmp_path):
    """A link planted at a file's place is replaced by the file; a linked folder is refused."""
    out, elsewhere = tmp_path / "kit", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "victim.yaml"
    victim.write_text("keep\n")
    (out / "otelcol-config.yaml").symlink_to(victim)
    stack.kit.configs(out, force=True, out=lambda _: None)
    assert victim.read_text() == "keep\n" and not (out / "otelcol-config.yaml").is_symlink()
    other = tmp_path / "kit2"
    other.mkdir()
    (other / "prometheus").symlink_to(elsewhere)
    with pytest.raises(CommandError, match="is a link"):
        stack.kit.configs(other, out=lambda _: None)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.yaml"]


def test_configs_needs_one_folder(tmp_path, capsys):
    assert cli.main(["stack", "configs"]) == USAGE
    assert cli.main(["stack", "configs", str(tmp_path / "a"), str(tmp_path / "b")]) == USAGE
    assert cli.main(["stack", "status", "extra", "--data-dir", str(tmp_path)]) == USAGE


def test_stack_up_reads_a_folder_configs_wrote(tmp_path, components):
    out = tmp_path / "kit"
    stack.kit.configs(out, out=lambda _: None)
    binaries = {c: comp.argv[0] for c, comp in components.items()}
    planned = {c.name: c for c in stack.render.plan(binaries, out, tmp_path / "data2", dict(stack.ports.DEFAULT_PORTS))}
    assert planned["otelcol"].argv[1] == f"--config={out / 'otelcol-config.yaml'}"
    prom = yaml.safe_load((tmp_path / "data2" / "prometheus" / "prometheus.yml").read_text())
    assert all(rule.startswith(str(out / "prometheus")) for rule in prom["rule_files"])


def test_build_runs_the_kits_script_with_the_components(tmp_path, monkeypatch, capsys):
    """`stack build` is backends.sh of the installed kit: here a stand-in that records its arguments."""
    script = tmp_path / "scripts" / "backends.sh"
    script.parent.mkdir()
    script.write_text('echo "$@" > "$(dirname "$0")/args"\nexit ${FAIL:-0}\n')
    monkeypatch.setattr(stack.kit, "ops_kit", lambda: stack.kit.Kit(COLLECTOR, script))
    go = tmp_path / "bin" / "go"
    go.parent.mkdir()
    go.write_text("#!/bin/sh\n")
    go.chmod(0o755)
    monkeypatch.setenv("PATH", f"{go.parent}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["stack", "build", "prometheus", "jaeger"]) == 0
    assert (script.parent / "args").read_text().split() == ["prometheus", "jaeger"]
    monkeypatch.setenv("FAIL", "1")
    assert cli.main(["stack", "build"]) == PROBLEM
    assert cli.main(["stack", "build", "grafana"]) == USAGE
    assert "unknown component 'grafana'" in capsys.readouterr().err


def test_build_without_go_says_what_to_get(tmp_path, monkeypatch, capsys):
    bash_dir = Path(shutil.which("bash")).parent
    empty = tmp_path / "path"
    empty.mkdir()
    (empty / "bash").symlink_to(bash_dir / "bash")
    monkeypatch.setenv("PATH", str(empty))
    assert cli.main(["stack", "build"]) == PROBLEM
    err = capsys.readouterr().err
    assert "Go >= 1.26.8" in err and "otelcol-contrib" in err and "victoria-logs" in err


def test_readiness_checks_of_the_stacks_own_services_never_go_through_a_proxy(monkeypatch):
    """``$http_proxy`` is for the outside world: a proxy (or a proxy's log) must not see, or be able
    to fake, the answers of the stack's own 127.0.0.1 services."""
    import http.server
    import socket
    import threading

    proxy_hits: list[tuple] = []
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(8)

    def serve_proxy() -> None:
        while True:
            try:
                conn, peer = proxy.accept()
            except OSError:
                return
            proxy_hits.append(peer)
            conn.close()

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    service = http.server.HTTPServer(("127.0.0.1", 0), Ready)
    threads = [threading.Thread(target=serve_proxy, daemon=True), threading.Thread(target=service.serve_forever)]
    for t in threads:
        t.start()
    try:
        proxy_url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy"):
            monkeypatch.setenv(var, proxy_url)
        for var in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(var, raising=False)
        assert stack.supervisor._answers(f"http://127.0.0.1:{service.server_address[1]}/-/ready")
    finally:
        service.shutdown()
        service.server_close()
        proxy.close()
    assert proxy_hits == []
