"""The launcher hands the OTEL_* settings and the run's names to every Ray worker."""

from __future__ import annotations

import json
import os

import pytest
from omegaconf import OmegaConf

from otel_verl import config
from otel_verl.hooks import ray_launch


def _run_ppo_like(config_obj, kwargs):  # noqa: ARG001 - the frame local ``config`` is what verl has
    config = config_obj  # noqa: F841 - read from this frame by the hook
    return ray_launch._with_otel_env(kwargs)


def test_runtime_env_gets_otel_vars_and_run_names(monkeypatch):
    for var in (config.PROJECT, config.EXPERIMENT):
        monkeypatch.setenv(var, "x")
        monkeypatch.delenv(var)  # restored to unset after the test
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-7")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    cfg = OmegaConf.create({"trainer": {"project_name": "gsm8k", "experiment_name": "qwen-grpo"}})
    user_env = {"env_vars": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://mine:4317", "TOKENIZERS_PARALLELISM": "true"}}
    out = _run_ppo_like(cfg, {"num_cpus": 8, "runtime_env": user_env})
    env_vars = out["runtime_env"]["env_vars"]
    assert env_vars["OTEL_VERL_RUN_ID"] == "run-7"
    assert env_vars["OTEL_VERL_PROJECT"] == "gsm8k" and env_vars["OTEL_VERL_EXPERIMENT"] == "qwen-grpo"
    assert env_vars["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://mine:4317"  # the user's runtime_env wins
    assert env_vars["TOKENIZERS_PARALLELISM"] == "true" and out["num_cpus"] == 8
    assert os.environ["OTEL_VERL_PROJECT"] == "gsm8k"  # and children of the launcher inherit it
    config.settings.cache_clear()


def test_switch_off(monkeypatch):
    monkeypatch.setenv(config.RAY_RUNTIME_ENV, "false")
    config.settings.cache_clear()
    try:
        assert ray_launch._with_otel_env({"num_cpus": 1}) == {"num_cpus": 1}
    finally:
        monkeypatch.delenv(config.RAY_RUNTIME_ENV)
        config.settings.cache_clear()


def test_auth_headers_stay_out_of_the_runtime_env_unless_asked(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cret")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=s3cret")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317")
    config.settings.cache_clear()
    env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
    assert "s3cret" not in repr(env_vars) and env_vars["OTEL_EXPORTER_OTLP_ENDPOINT"] == "https://collector:4317"

    monkeypatch.setenv(config.RAY_RUNTIME_ENV_SECRETS, "true")
    config.settings.cache_clear()
    try:
        env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
        assert env_vars["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer s3cret"
    finally:
        monkeypatch.delenv(config.RAY_RUNTIME_ENV_SECRETS)
        config.settings.cache_clear()


@pytest.fixture
def no_disabled_list(monkeypatch):
    monkeypatch.delenv(config.DISABLED_INSTRUMENTATIONS, raising=False)  # restored after the test
    config.settings.cache_clear()
    yield monkeypatch
    config.settings.cache_clear()


def test_ray_processes_skip_the_generic_system_metrics_instrumentation(no_disabled_list):
    no_disabled_list.setenv(config.DISABLED_INSTRUMENTATIONS, "requests")
    for _ in range(2):  # idempotent
        env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
        assert env_vars[config.DISABLED_INSTRUMENTATIONS] == "requests,system_metrics"
        # GCS, raylet and dashboard processes are children of the launcher: its env says it too
        assert os.environ[config.DISABLED_INSTRUMENTATIONS] == "requests,system_metrics"


def test_system_metrics_in_ray_processes_on_request(no_disabled_list):
    no_disabled_list.setenv(config.RAY_SYSTEM_METRICS, "true")
    config.settings.cache_clear()
    env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
    assert config.DISABLED_INSTRUMENTATIONS not in env_vars
    assert config.DISABLED_INSTRUMENTATIONS not in os.environ


def test_ray_runtime_env_leaves_out_secret_looking_variables(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/keys/client.pem")
    monkeypatch.setenv("OTEL_EXPORTER_VENDOR_API_KEY", "vendor-key")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv(config.RAY_RUNTIME_ENV_SECRETS, "false")
    config.settings.cache_clear()
    try:
        env = ray_launch.otel_env()
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in env and config.RAY_RUNTIME_ENV_SECRETS in env
        for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_VENDOR_API_KEY"):
            assert name not in env
        monkeypatch.setenv(config.RAY_RUNTIME_ENV_SECRETS, "true")
        config.settings.cache_clear()
        assert "OTEL_EXPORTER_VENDOR_API_KEY" in ray_launch.otel_env()
    finally:
        config.settings.cache_clear()


@pytest.fixture
def under_opentelemetry_instrument(monkeypatch):
    """This process as ``opentelemetry-instrument`` starts it: its sitecustomize folder first on PYTHONPATH."""
    import opentelemetry.instrumentation.auto_instrumentation as auto

    folder = os.path.dirname(os.path.abspath(auto.__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([folder, "/work/dir"]))
    monkeypatch.delenv(config.RAY_RUNTIME_ENV, raising=False)
    config.settings.cache_clear()
    yield folder
    config.settings.cache_clear()


def _init_seen(kwargs, *, starts_cluster: bool, monkeypatch) -> tuple[dict, str]:
    """What a wrapped ``ray.init`` receives and the PYTHONPATH its daemons would inherit."""
    monkeypatch.setattr(ray_launch, "_starts_local_cluster", lambda kw: starts_cluster)
    seen = {}

    def fake_init(**kw):
        seen.update(kw=kw, daemons=os.environ["PYTHONPATH"])
        return "ctx"

    assert ray_launch._ray_init_wrapper(fake_init, None, (), kwargs) == "ctx"
    return seen["kw"], seen["daemons"]


def test_a_new_local_clusters_daemons_start_without_the_sitecustomize(under_opentelemetry_instrument, monkeypatch):
    from otel_verl.process.worker_bootstrap import SITE_DIR

    own = os.environ["PYTHONPATH"]
    kw, daemons = _init_seen({"num_cpus": 2}, starts_cluster=True, monkeypatch=monkeypatch)
    assert daemons == "/work/dir"  # Ray's own processes: no opentelemetry-instrument bootstrap
    # the job's workers: the same bootstrap, without a configurator, in the same place on the path
    assert kw["runtime_env"]["env_vars"]["PYTHONPATH"] == os.pathsep.join([SITE_DIR, "/work/dir"])
    assert os.environ["PYTHONPATH"] == own  # restored for this process's later children


def test_pythonpath_left_alone_on_a_running_cluster_or_a_users_own(under_opentelemetry_instrument, monkeypatch):
    own = os.environ["PYTHONPATH"]
    kw, daemons = _init_seen({"address": "ray://head:10001"}, starts_cluster=False, monkeypatch=monkeypatch)
    assert daemons == own and "PYTHONPATH" not in kw["runtime_env"]["env_vars"]
    user = {"runtime_env": {"env_vars": {"PYTHONPATH": "/mine"}}}
    kw, daemons = _init_seen(user, starts_cluster=True, monkeypatch=monkeypatch)
    assert daemons == own and kw["runtime_env"]["env_vars"]["PYTHONPATH"] == "/mine"
    monkeypatch.setenv(config.RAY_RUNTIME_ENV, "false")
    config.settings.cache_clear()
    kw, daemons = _init_seen({"num_cpus": 2}, starts_cluster=True, monkeypatch=monkeypatch)
    assert daemons == own and kw == {"num_cpus": 2}


def test_pythonpath_left_alone_without_opentelemetry_instrument(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/work/dir")
    config.settings.cache_clear()
    try:
        kw, daemons = _init_seen({}, starts_cluster=True, monkeypatch=monkeypatch)
    finally:
        config.settings.cache_clear()
    assert daemons == "/work/dir" and "PYTHONPATH" not in kw["runtime_env"]["env_vars"]


def test_starts_local_cluster_reads_rays_own_rule(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_launch._starts_local_cluster({"address": "local"}) is True
    assert ray_launch._starts_local_cluster({"address": "10.0.0.1:6379"}) is False


@pytest.fixture
def fresh_warnings(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP_") or name == "OTEL_RESOURCE_ATTRIBUTES":
            monkeypatch.delenv(name)
    monkeypatch.delenv(config.RAY_RUNTIME_ENV_SECRETS, raising=False)
    config.settings.cache_clear()
    yield monkeypatch
    config.settings.cache_clear()


def test_credentials_in_values_stay_out_of_the_runtime_env(fresh_warnings, caplog):
    env = fresh_warnings
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://tenant:endpo1ntpw@collector:4318/v1/traces")
    env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://collector:4318/v1/metrics?api_key=qu3ryk3y")
    env.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "https://collector:4318/v1/logs?token=qu3rytok")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    attributes = "deployment.environment=prod,api_key=attrk3y,team=rl,db.url=postgres%3A%2F%2Fu%3Adbpw%40h%2Fdb"
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", attributes)
    env.setenv("OTEL_EXPORTER_OTLP_HEADER", "authorization=Bearer singularh3ader")  # misspelt: a header all the same
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADER", "x-api-key=singularh3ader")
    with caplog.at_level("WARNING", logger="otel_verl"):
        env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
    text = repr(env_vars)
    for secret in ("endpo1ntpw", "qu3ryk3y", "qu3rytok", "attrk3y", "dbpw", "singularh3ader"):
        assert secret not in text
        assert secret not in caplog.text  # the warning names what was left out, never its value
    for name in ("TRACES", "METRICS", "LOGS"):
        assert f"OTEL_EXPORTER_OTLP_{name}_ENDPOINT" not in env_vars  # left out: a local cluster's workers inherit it
        assert f"OTEL_EXPORTER_OTLP_{name}_ENDPOINT" in caplog.text
    assert "OTEL_EXPORTER_OTLP_HEADER" not in env_vars and "OTEL_EXPORTER_OTLP_TRACES_HEADER" not in env_vars
    assert env_vars["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4317"
    assert env_vars["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=prod,team=rl"
    assert "'api_key'" in caplog.text and "'db.url'" in caplog.text
    assert len([r for r in caplog.records if "runtime_env" in r.getMessage()]) == 1
    assert config.RAY_RUNTIME_ENV_SECRETS in caplog.text  # and what to do about it

    env.setenv(config.RAY_RUNTIME_ENV_SECRETS, "true")  # asked for: everything as it is
    config.settings.cache_clear()
    env_vars = ray_launch._with_otel_env({})["runtime_env"]["env_vars"]
    assert env_vars["OTEL_RESOURCE_ATTRIBUTES"] == attributes
    assert env_vars["OTEL_EXPORTER_OTLP_HEADER"] == "authorization=Bearer singularh3ader"
    assert "endpo1ntpw" in env_vars["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]


def test_plain_settings_travel_with_no_warning(fresh_warnings, caplog):
    env = fresh_warnings
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example.com:4318")
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.namespace=rl")
    env.setenv("OTEL_SERVICE_NAME", "verl")
    with caplog.at_level("WARNING", logger="otel_verl"):
        env_vars = ray_launch.otel_env()
    assert env_vars["OTEL_EXPORTER_OTLP_ENDPOINT"] == "https://collector.example.com:4318"
    assert env_vars["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=prod,service.namespace=rl"
    assert env_vars["OTEL_SERVICE_NAME"] == "verl"
    assert [r for r in caplog.records if r.name.startswith("otel_verl")] == []


def _submitted_with(monkeypatch, runtime_env: dict) -> None:
    """This process as Ray's job supervisor starts a submitted job's entrypoint (``ray job submit``)."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    monkeypatch.setenv(RAY_JOB_CONFIG_JSON_ENV_VAR, json.dumps({"runtime_env": runtime_env, "metadata": {}}))
    for name, value in runtime_env.get("env_vars", {}).items():
        monkeypatch.setenv(name, value)  # the supervisor runs the entrypoint with the job's env_vars
    config.settings.cache_clear()


def test_a_job_submitted_with_otel_variables_in_its_runtime_env_still_merges(monkeypatch):
    """``ray job submit --runtime-env-json '{"env_vars": {"OTEL_...": ...}}'``: the entrypoint's
    ``ray.init`` merges the job's runtime_env with the one passed to it and raises on a variable
    in both (Ray's own merge, below); the job's variables are left to the job."""
    from ray.runtime_env.runtime_env import _merge_runtime_env

    job = {"env_vars": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317", "OTEL_SERVICE_NAME": "verl-job"}}
    _submitted_with(monkeypatch, job)
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-9")
    try:
        verl_env = {"env_vars": {"TOKENIZERS_PARALLELISM": "true"}}  # what verl's main_ppo passes
        out = ray_launch._with_otel_env({"runtime_env": verl_env})["runtime_env"]
        merged = _merge_runtime_env(job, out)  # what ray.init does with the two (None: it raises)
        assert merged is not None, out
        assert merged["env_vars"]["OTEL_VERL_RUN_ID"] == "run-9"  # what the job lacks still goes
        assert merged["env_vars"]["OTEL_SERVICE_NAME"] == "verl-job"
        assert merged["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"
    finally:
        config.settings.cache_clear()


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"runtime_env": 3}', '{"runtime_env": {"env_vars": []}}'])
def test_an_unreadable_job_config_counts_as_none(monkeypatch, raw):
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    monkeypatch.setenv(RAY_JOB_CONFIG_JSON_ENV_VAR, raw)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "verl-job")
    config.settings.cache_clear()
    try:
        assert ray_launch._submitted_job_env_vars() == frozenset()
        assert ray_launch._with_otel_env({})["runtime_env"]["env_vars"]["OTEL_SERVICE_NAME"] == "verl-job"
    finally:
        config.settings.cache_clear()
