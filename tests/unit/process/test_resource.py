"""The resource every process's telemetry carries (``otel_verl.process.resource.build_resource``):
otel-verl's defaults under what the user set, the node's Slurm and Kubernetes facts, the process's
own identity whatever a job-wide variable says."""

from __future__ import annotations

import socket

import pytest

from otel_verl import config, semconv
from otel_verl.process.resource import FROM_ENV, Identity, build_resource


@pytest.fixture
def env(monkeypatch):
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", *(var for _, var in FROM_ENV)):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-7")
    config.settings.cache_clear()
    yield monkeypatch
    config.settings.cache_clear()


def _attrs(**identity) -> dict:
    return dict(build_resource(Identity(**identity)).attributes)


def test_what_the_user_set_wins_over_otel_verls_defaults(env):
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=rl-team,host.name=gpu-node-3,service.namespace=research")
    attrs = _attrs(role=semconv.ROLE_WORKER, rank=2)
    assert attrs[semconv.RES_SERVICE_NAME] == "rl-team"
    assert attrs[semconv.RES_HOST_NAME] == "gpu-node-3"
    assert attrs["service.namespace"] == "research"
    assert attrs[semconv.RES_RANK] == 2 and attrs[semconv.RES_ROLE] == semconv.ROLE_WORKER


def test_otel_service_name_wins_and_the_defaults_fill_the_rest(env):
    env.setenv("OTEL_SERVICE_NAME", "grpo-qwen")
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment.name=prod")
    attrs = _attrs()
    assert attrs[semconv.RES_SERVICE_NAME] == "grpo-qwen"  # the SDK's order: OTEL_SERVICE_NAME first
    assert attrs["deployment.environment.name"] == "prod"
    assert attrs[semconv.RES_HOST_NAME] == socket.gethostname()
    env.delenv("OTEL_SERVICE_NAME")
    env.delenv("OTEL_RESOURCE_ATTRIBUTES")
    assert _attrs()[semconv.RES_SERVICE_NAME] == semconv.SERVICE_NAME_DEFAULT


def test_service_version_is_the_installed_verls_unless_the_user_set_one(env):
    import importlib.metadata

    assert _attrs()[semconv.RES_SERVICE_VERSION] == importlib.metadata.version("verl")
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=2026.12-rc1")
    assert _attrs()[semconv.RES_SERVICE_VERSION] == "2026.12-rc1"


def test_the_processs_identity_is_its_own_whatever_a_job_wide_variable_says(env):
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", f"{semconv.RES_ROLE}=taskrunner,{semconv.RES_PROCESS_PID}=1")
    attrs = _attrs(role=semconv.ROLE_AGENT_LOOP)
    assert attrs[semconv.RES_ROLE] == semconv.ROLE_AGENT_LOOP
    assert attrs[semconv.RES_PROCESS_PID] != "1"


def test_the_nodes_slurm_and_kubernetes_facts_from_its_environment(env):
    facts = {
        "SLURM_CLUSTER_NAME": "dgx",
        "SLURM_JOB_ID": "481516",
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": "3",
        "K8S_POD_NAME": "rl-raycluster-worker-gpu-x7k2p",
        "K8S_POD_UID": "0b7f9e2c-1a2b-4c3d-8e9f-001122334455",
        "K8S_NAMESPACE_NAME": "rl",
        "K8S_NODE_NAME": "gke-a3-node-17",
    }
    for var, value in facts.items():
        env.setenv(var, value)
    attrs = _attrs()
    assert {attr: attrs.get(attr) for attr, _ in FROM_ENV} == {
        semconv.RES_SLURM_CLUSTER_NAME: "dgx",
        semconv.RES_SLURM_JOB_ID: "481516",
        semconv.RES_SLURM_STEP_ID: "0",
        semconv.RES_SLURM_NODE_ID: "3",
        semconv.RES_K8S_POD_NAME: "rl-raycluster-worker-gpu-x7k2p",
        semconv.RES_K8S_POD_UID: "0b7f9e2c-1a2b-4c3d-8e9f-001122334455",
        semconv.RES_K8S_NAMESPACE_NAME: "rl",
        semconv.RES_K8S_NODE_NAME: "gke-a3-node-17",
    }
    # the user's own value wins; an empty variable and a huge one do no harm
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=set-by-user")
    env.setenv("SLURM_STEP_ID", "  ")
    env.setenv("SLURM_JOB_ID", "9" * 100_000)
    attrs = _attrs()
    assert attrs[semconv.RES_K8S_POD_NAME] == "set-by-user"
    assert semconv.RES_SLURM_STEP_ID not in attrs
    assert attrs[semconv.RES_SLURM_JOB_ID] == "9" * 256


def test_no_slurm_or_kubernetes_attribute_outside_them(env):
    attrs = _attrs()
    assert not [k for k in attrs if k.startswith(("slurm.", "k8s."))]
