"""collector/compose.yaml: pinned images, localhost-only ports, mounts."""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest
from support.opskit import COLLECTOR, COMPOSE_FILE, DATASOURCES_FILE, load_otelcol_config, load_yaml

EXPECTED_SERVICES = {"otelcol", "prometheus", "tempo", "loki", "grafana", "alertmanager"}


@pytest.fixture(scope="module")
def compose():
    return load_yaml(COMPOSE_FILE)


def test_services_present(compose):
    assert EXPECTED_SERVICES <= set(compose["services"])


def test_images_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc["image"]
        ref = image.split("@", 1)[0]
        assert ":" in ref.rsplit("/", 1)[-1], f"{name}: image {image} has no tag"
        tag = ref.rsplit(":", 1)[1]
        assert tag not in ("latest", "main", "master", "nightly", "edge"), f"{name}: {image}"
        assert re.match(r"^v?\d+\.\d+(\.\d+)?([.-][\w.]+)?$", tag), f"{name}: tag {tag!r} is not a version"


def _ports(svc):
    yield from svc.get("ports", []) or []


def test_ports_bound_to_localhost(compose):
    seen = 0
    for name, svc in compose["services"].items():
        assert "network_mode" not in svc or svc["network_mode"] != "host", f"{name}: host networking"
        for p in _ports(svc):
            seen += 1
            if isinstance(p, dict):
                assert p.get("host_ip") == "127.0.0.1", f"{name}: {p}"
                assert p.get("published"), f"{name}: {p} lets Docker pick a port on all interfaces"
            else:
                s = str(p)
                assert s.startswith("127.0.0.1:") and s.count(":") == 2, f"{name}: port {s!r} not bound to 127.0.0.1"
    assert seen >= 6


def test_required_ports_published(compose):
    published = {name: {str(p).split(":")[1] for p in _ports(svc)} for name, svc in compose["services"].items()}
    assert {"4317", "4318"} <= published["otelcol"]
    assert "9090" in published["prometheus"]
    assert "3000" in published["grafana"]
    assert "9093" in published["alertmanager"]


def test_bind_mounts_exist_and_volumes_declared(compose):
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, svc in compose["services"].items():
        for v in svc.get("volumes", []) or []:
            src = v.split(":")[0]
            if src.startswith("."):
                assert (COLLECTOR / src).exists(), f"{name}: {src} does not exist in collector/"
                assert v.endswith(":ro"), f"{name}: config mount {v} should be read-only"
            else:
                assert src in declared, f"{name}: named volume {src} not declared"
                used.add(src)
    assert declared == used


def test_backend_hostnames_are_services(compose):
    services = set(compose["services"])
    cfg = load_otelcol_config()
    for name, exp in cfg["exporters"].items():
        ep = exp["endpoint"]
        host = urlparse(ep).hostname if "://" in ep else ep.split(":")[0]
        assert host in services, f"exporter {name} -> {host} is not a compose service"
    for ds in load_yaml(DATASOURCES_FILE)["datasources"]:
        assert urlparse(ds["url"]).hostname in services, ds["name"]


def test_otelcol_waits_for_backends(compose):
    deps = compose["services"]["otelcol"]["depends_on"]
    assert {"prometheus", "tempo", "loki"} <= set(deps)


def test_no_admin_or_shutdown_for_whoever_reaches_a_port(compose):
    """127.0.0.1 is every user of a shared login node: no anonymous Grafana Admin by default, and
    no Prometheus lifecycle API (POST /-/quit); otel-verl stack runs Prometheus with these flags too."""
    assert "--web.enable-lifecycle" not in compose["services"]["prometheus"]["command"]
    grafana = compose["services"]["grafana"]["environment"]
    role = re.fullmatch(r"\$\{GRAFANA_ANONYMOUS_ROLE:-(\w+)\}", grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"])
    assert role is not None and role.group(1) in ("Viewer", "Editor"), grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"]
