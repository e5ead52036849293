"""``examples/kuberay/``: the manifests against the real schemas (Kubernetes' own, from
``kubernetes-validate``, strict: an unknown field fails; KubeRay's RayJob CRD from its Go module,
made as strict), and what the schemas cannot say: the agent's config files and variables, the
Service that reaches the agent of the caller's node, the downward-API names otel-verl reads, the
token file and the spool folder, the entrypoint and the image. The agent's config with the
DaemonSet's variables is validated by the real Collector.

Not run on a cluster (no Kubernetes here)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from ops.test_otelcol_config import _collector_binary
from support.components import require, require_module, require_tool
from support.opskit import COLLECTOR, REPO, run_tool

from otel_verl import config, semconv
from otel_verl.process import resource
from otel_verl.version import __version__

EXAMPLE = REPO / "examples" / "kuberay"
AGENT_FILE = EXAMPLE / "otel-agent.yaml"
RAYJOB_FILE = EXAMPLE / "rayjob.yaml"
KUBERNETES_VERSIONS = ("1.30", "1.37")  # the oldest and newest the example is checked with
# The KubeRay release the RayJob is written for; its CRDs come from the Go module proxy into the
# repo's Go cache (as scripts/backends.sh fetches the backends' modules).
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = "v1.5.0"
GO_HOW = "Go >= 1.26.8 and the Go module proxy (or the module in GOMODCACHE: ~/.cache/otel-verl/go/mod)"
# the agent's variables that name a file (a Secret's key)
AGENT_FILE_VARIABLES = (
    "OTELCOL_BEARER_TOKEN_FILE",
    "OTELCOL_GATEWAY_CA_FILE",
    "OTELCOL_TLS_CERT_FILE",
    "OTELCOL_TLS_KEY_FILE",
)
# the downward API field each K8S_* variable must come from (docs/multi-node.md)
FIELD_PATHS = {
    "K8S_POD_NAME": "metadata.name",
    "K8S_POD_UID": "metadata.uid",
    "K8S_NAMESPACE_NAME": "metadata.namespace",
    "K8S_NODE_NAME": "spec.nodeName",
}


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def mount_for(container: dict, pod_spec: dict, path: str) -> tuple[dict, dict]:
    """The volumeMount under which ``path`` lies, and its volume."""
    mounts = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{path}: under no volumeMount of {container['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = {v["name"]: v for v in pod_spec["volumes"]}[mount["name"]]
    return mount, volume


def kubectl_lines() -> list[str]:
    """The `kubectl ...` commands README.md tells the user to run, continuation lines joined."""
    text = (EXAMPLE / "README.md").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.startswith("kubectl ")]


# ------------------------------------------------------------------------------------------------
# Schemas


@pytest.fixture(scope="module")
def kubernetes_validate():
    return require_module("kubernetes_validate", "in the test extra: pip install -e '.[test]'")


def strict(schema):
    """A CRD's structural schema that refuses unknown fields, as `kubectl apply --validate=strict`
    does (the API server would drop them silently otherwise)."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


@pytest.fixture(scope="module")
def rayjob_schema(tmp_path_factory) -> dict:
    go = require_tool("go", GO_HOW)
    env = {
        **os.environ,
        "GOMODCACHE": os.environ.get("GOMODCACHE") or str(Path.home() / ".cache" / "otel-verl" / "go" / "mod"),
        "GOFLAGS": "-mod=mod",
    }
    res = subprocess.run(
        [go, "mod", "download", "-json", f"{KUBERAY_MODULE}@{KUBERAY_VERSION}"],
        cwd=tmp_path_factory.mktemp("go"),  # no go.mod around: the module alone
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if res.returncode != 0:
        require(f"{KUBERAY_MODULE}@{KUBERAY_VERSION}", f"go mod download failed ({res.stdout}{res.stderr}); {GO_HOW}")
    crd_file = Path(json.loads(res.stdout)["Dir"]) / "config" / "crd" / "bases" / "ray.io_rayjobs.yaml"
    crd = yaml.load(crd_file.read_text(), Loader=yaml.CSafeLoader)
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return strict(copy.deepcopy(v1["schema"]["openAPIV3Schema"]))


def configmap_from_files() -> dict:
    """The ConfigMap README.md's `kubectl create configmap ... --from-file=...` makes."""
    (line,) = [line for line in kubectl_lines() if "-n observability create configmap" in line]
    name = line.split("create configmap", 1)[1].split()[0]
    files = [REPO / f for f in re.findall(r"--from-file=(\S+)", line)]
    assert files and all(f.is_file() for f in files), line
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "observability"},
        "data": {f.name: f.read_text() for f in files},
    }


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_agent_manifests_match_kubernetes_schemas(kubernetes_validate, version):
    docs = load_all(AGENT_FILE)
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "Service"]
    for doc in [*docs, configmap_from_files()]:
        kubernetes_validate.validate(doc, version, strict=True)  # raises with the field's path


def test_strict_schema_refuses_an_unknown_field(kubernetes_validate, rayjob_schema):
    """The checks above can fail: a misspelt field is refused by both schemas."""
    service = by_kind(load_all(AGENT_FILE))["Service"]
    service["spec"]["internalTrafficPolcy"] = "Local"
    with pytest.raises(jsonschema.ValidationError):
        kubernetes_validate.validate(service, KUBERNETES_VERSIONS[-1], strict=True)
    job = load_all(RAYJOB_FILE)[0]
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["envv"] = []
    assert list(jsonschema.Draft7Validator(rayjob_schema).iter_errors(job))


def test_rayjob_matches_kuberay_crd(rayjob_schema):
    (job,) = load_all(RAYJOB_FILE)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    validator = jsonschema.Draft7Validator(rayjob_schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(job)]
    assert not errors, errors


# ------------------------------------------------------------------------------------------------
# The agent


def agent_pod() -> tuple[dict, dict, dict]:
    docs = by_kind(load_all(AGENT_FILE))
    pod = docs["DaemonSet"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    return docs["Service"], pod, container


def test_agent_runs_the_kits_configs_with_every_variable_they_need():
    _, pod, container = agent_pod()
    pod_namespace = by_kind(load_all(AGENT_FILE))["DaemonSet"]["metadata"]["namespace"]
    cm = configmap_from_files()
    configs = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--config=")]
    assert [Path(c).name for c in configs] == ["otelcol-agent.yaml", "otelcol-remote.yaml"]
    for path in configs:
        mount, volume = mount_for(container, pod["spec"], path)
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        assert Path(path).name in cm["data"]
    env = env_of(container)
    needed = set()
    for text in cm["data"].values():
        needed |= set(re.findall(r"\$\{env:([A-Z0-9_]+)\}", text))  # no default: must be set
    assert needed <= set(env), needed - set(env)
    # the agent's files on its volumes: secrets under their keys, the queue on the node's disk
    keys = " ".join(kubectl_lines())
    for name in AGENT_FILE_VARIABLES:
        path = env[name]["value"]
        mount, volume = mount_for(container, pod["spec"], path)
        secret = volume["secret"]["secretName"]
        key = path[len(mount["mountPath"]) + 1 :]
        ns = f"kubectl -n {pod_namespace}"
        assert f"{ns} create secret generic {secret} --from-file={key}=" in keys or (
            f"{ns} create secret tls {secret} " in keys and key in ("tls.crt", "tls.key")
        ), (name, secret, key, keys)
    _, queue = mount_for(container, pod["spec"], env["OTELCOL_STORAGE_DIR"]["value"] + "/x")
    assert "hostPath" in queue
    resolver = yaml.safe_load(env["OTELCOL_GATEWAY_RESOLVER"]["value"])
    assert set(resolver) == {"dns"} and resolver["dns"]["port"] == "4317"


def test_service_reaches_the_agent_of_the_callers_node():
    service, pod, container = agent_pod()
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    for port in service["spec"]["ports"]:
        assert named[port["targetPort"]] == port["port"], port
    probe = container["readinessProbe"]["httpGet"]["port"]
    assert env_of(container)["OTELCOL_LISTEN_HOST"]["value"] == "0.0.0.0"  # the kubelet probes the pod IP
    assert probe == 13133  # otelcol-agent.yaml's health_check default


@pytest.mark.live_stack  # runs last: the Collector binary may still be building
def test_agent_config_with_the_daemonsets_env_is_valid_for_the_collector(tmp_path):
    binary = _collector_binary()
    _, _, container = agent_pod()
    env = {e["name"]: e["value"] for e in container["env"]}
    for name in AGENT_FILE_VARIABLES:
        stand_in = tmp_path / Path(env[name]).name
        stand_in.write_text("x\n")
        env[name] = str(stand_in)
    env["OTELCOL_STORAGE_DIR"] = str(tmp_path / "queue")
    configs = [f"--config={COLLECTOR / Path(a.split('=', 1)[1]).name}" for a in container["args"]]
    res = run_tool([binary, "validate", *configs], env=env)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------------
# The RayJob


def ray_pods() -> list[tuple[str, dict, dict]]:
    (job,) = load_all(RAYJOB_FILE)
    cluster = job["spec"]["rayClusterSpec"]
    templates = [("head", cluster["headGroupSpec"]["template"])]
    templates += [(g["groupName"], g["template"]) for g in cluster["workerGroupSpecs"]]
    return [(name, t["spec"], t["spec"]["containers"][0]) for name, t in templates]


def test_every_ray_pod_names_itself_through_the_downward_api():
    read = {env for _attr, env in resource.FROM_ENV if env.startswith("K8S_")}
    assert read == set(FIELD_PATHS)  # otel-verl reads exactly these
    attrs = dict((env, attr) for attr, env in resource.FROM_ENV)
    assert attrs["K8S_POD_NAME"] == semconv.RES_K8S_POD_NAME == "k8s.pod.name"
    for group, _spec, container in ray_pods():
        env = env_of(container)
        for name, field in FIELD_PATHS.items():
            assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == field, (group, name)
        assert "K8S_" not in env.get("OTEL_RESOURCE_ATTRIBUTES", {}).get("value", ""), group


def test_ray_pods_send_to_the_agent_with_the_token_file_and_a_local_spool():
    service, _, _ = agent_pod()
    namespace = load_all(RAYJOB_FILE)[0]["metadata"]["namespace"]
    for group, spec, container in ray_pods():
        env = {n: e.get("value") for n, e in env_of(container).items()}
        url = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert url.scheme == "https"  # the agent takes TLS + the token (otelcol-remote.yaml)
        assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
        grpc = {p["name"]: p["port"] for p in service["spec"]["ports"]}["otlp-grpc"]
        assert url.port == grpc
        # the token file: the agent's token, from a Secret, under its key
        headers = env[config.OTLP_HEADERS_FILE]
        mount, volume = mount_for(container, spec, headers)
        secret = volume["secret"]["secretName"]
        create = f"kubectl -n {namespace} create secret generic {secret} --from-file={Path(headers).name}="
        assert create in " ".join(kubectl_lines()), create
        assert volume["secret"]["defaultMode"] & 0o007 == 0  # otel-verl warns about a file all can read
        _, ca = mount_for(container, spec, env["OTEL_EXPORTER_OTLP_CERTIFICATE"])
        assert "configMap" in ca or "secret" in ca
        _, spool = mount_for(container, spec, env[config.SPOOL_DIR] + "/x")
        assert "emptyDir" in spool and spool["emptyDir"].get("medium") != "Memory", group  # node-local disk


def test_entrypoint_and_image():
    (job,) = load_all(RAYJOB_FILE)
    assert job["spec"]["entrypoint"].split()[:4] == ["verl-otel-job", "python3", "-m", "verl.trainer.main_ppo"]
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    # the wheel `python -m build` writes for this version, with the extras pyproject.toml declares
    assert f"ARG WHEEL=dist/otel_verl-{__version__}-py3-none-any.whl" in dockerfile
    pyproject = (REPO / "pyproject.toml").read_text()
    for extra in re.search(r"\[(\w+(?:,\w+)*)\]\"", dockerfile).group(1).split(","):
        assert re.search(rf"^{extra} = \[", pyproject, re.M), extra
    copied = re.search(r"^COPY --chmod=755 (\S+) /usr/local/bin/verl-otel-job$", dockerfile, re.M)
    assert copied and (REPO / copied.group(1)).is_file()


def test_entrypoint_fills_the_launchers_headers_from_the_token_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-77\n")
    standins = Path(__file__).resolve().parent / "slurm_standins"  # its opentelemetry-instrument records the env
    log = tmp_path / "calls.log"
    env = {
        "PATH": f"{standins}:/usr/bin:/bin",
        "STANDIN_LOG": str(log),
        "STANDIN_DIR": str(tmp_path),
        config.OTLP_HEADERS_FILE: str(token),
    }
    script = shutil.which("sh")
    subprocess.run([script, str(EXAMPLE / "verl-otel-job"), "python3", "-m", "x", "a=1 b"], env=env, check=True)
    assert log.read_text().splitlines() == ["job\tbatch\tpython3 -m x a=1 b"]
    job_env = dict(line.split("=", 1) for line in (tmp_path / "job.env").read_text().splitlines())
    assert job_env["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer%20tok-77"
