"""A private name of Ray, verl, Python or the SDK that is gone (``otel_verl.private_api``): at each
place otel-verl uses one, the name is taken away as a future release would, and the caller must
say so once, with the installed versions of the packages involved, and fail in the safe direction.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest

from otel_verl import config

PYTHON = "python"


def _version(dist: str) -> str:
    """What the message must name: ``ray 2.60.0``, or ``CPython 3.11.9`` for the interpreter."""
    import importlib.metadata
    import platform

    if dist == PYTHON:
        return f"{platform.python_implementation()} {platform.python_version()}"
    return f"{dist} {importlib.metadata.version(dist)}"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("otel_verl") and r.levelno >= logging.WARNING]


def _said_once_with_versions(caplog, *dists: str) -> str:
    messages = _warnings(caplog)
    assert len(messages) == 1, messages
    for dist in dists:
        assert _version(dist) in messages[0], messages[0]
    return messages[0]


# ------------------------------------------------------------------ Ray: the actor's class (TaskRunner test)
def test_an_actor_whose_class_ray_no_longer_tells_gets_no_taskrunner_unsafe_hooks(monkeypatch, caplog):
    import ray

    from otel_verl.hooks.rollout import not_in_task_runner
    from otel_verl.process import resource

    handle = types.SimpleNamespace()  # a Ray ActorHandle without _ray_actor_creation_function_descriptor
    context = types.SimpleNamespace(get_actor_id=lambda: "f" * 32, current_actor=handle)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        # cannot tell whether this is the TaskRunner: the hooks that must not run there stay off
        assert not_in_task_runner() is False
        assert resource.ray_actor_class() == getattr(resource, "UNKNOWN_ACTOR", "no such value")
    message = _said_once_with_versions(caplog, "ray")
    assert "_ray_actor_creation_function_descriptor" in message


def test_an_actor_ray_names_is_told_apart_from_the_taskrunner(monkeypatch):
    import ray

    from otel_verl.hooks.rollout import not_in_task_runner

    def actor(name):
        descriptor = types.SimpleNamespace(class_name=name)
        handle = types.SimpleNamespace(_ray_actor_creation_function_descriptor=descriptor)
        return types.SimpleNamespace(get_actor_id=lambda: "f" * 32, current_actor=handle)

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: actor("AgentLoopWorker"))
    assert not_in_task_runner() is True
    monkeypatch.setattr(ray, "get_runtime_context", lambda: actor("TaskRunner"))
    assert not_in_task_runner() is False
    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_actor_id=lambda: None))
    assert not_in_task_runner() is True  # the driver: not an actor


# ------------------------------------------------------------------ Ray: does ray.init start a local cluster
def test_without_rays_address_rule_the_daemons_pythonpath_is_left_alone(monkeypatch, caplog):
    import ray._private.services as services

    from otel_verl.hooks import ray_launch

    monkeypatch.delattr(services, "canonicalize_bootstrap_address")
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert ray_launch._starts_local_cluster({"address": "local"}) is False  # cannot tell: not "yes"
        assert ray_launch._starts_local_cluster({}) is False
    assert "canonicalize_bootstrap_address" in _said_once_with_versions(caplog, "ray")


# ------------------------------------------------------------------ Python / verl: the launcher's run names
@pytest.fixture
def launcher_env(monkeypatch):
    for var in (config.PROJECT, config.EXPERIMENT, config.RAY_RUNTIME_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    config.settings.cache_clear()
    yield
    config.settings.cache_clear()


def test_without_sys_getframe_the_runtime_env_is_still_made(monkeypatch, caplog, launcher_env):
    from otel_verl.hooks import ray_launch

    # not sys itself: logging reads sys._getframe
    monkeypatch.setattr(ray_launch, "sys", types.SimpleNamespace(modules=sys.modules))
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        made = ray_launch._with_otel_env({})
    assert made["runtime_env"]["env_vars"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert "sys._getframe" in _said_once_with_versions(caplog, PYTHON)


def _called_from_verls_run_ppo(local_name: str):
    """``ray_launch._with_otel_env`` called as verl's ``run_ppo`` calls ``ray.init``, its config in ``local_name``."""
    from omegaconf import OmegaConf

    from otel_verl.hooks import ray_launch

    code = f"def run_ppo(cfg):\n    {local_name} = cfg\n    return with_otel_env({{}})\n"
    namespace = {"__name__": "verl.trainer.main_ppo", "with_otel_env": ray_launch._with_otel_env}
    exec(compile(code, "main_ppo.py", "exec"), namespace)  # noqa: S102 - a stand-in for verl's launcher
    cfg = OmegaConf.create({"trainer": {"project_name": "proj", "experiment_name": "exp"}})
    return namespace["run_ppo"](cfg)


def test_verls_launcher_without_its_config_local_is_said_with_verls_version(caplog, launcher_env):
    import os

    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        made = _called_from_verls_run_ppo("renamed_config")
    assert made["runtime_env"]["env_vars"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert config.PROJECT not in os.environ  # nothing guessed
    assert "run_ppo's local `config`" in _said_once_with_versions(caplog, "verl")


def test_verls_launcher_with_its_config_local_gives_the_run_names(caplog, launcher_env):
    import os

    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        made = _called_from_verls_run_ppo("config")
    assert made["runtime_env"]["env_vars"][config.PROJECT] == "proj"
    assert os.environ.pop(config.PROJECT) == "proj" and os.environ.pop(config.EXPERIMENT) == "exp"
    assert _warnings(caplog) == []


# ------------------------------------------------------------------ Ray: the stall board's key-value store
def test_a_ray_without_the_kv_put_leaves_the_stall_doctor_off(monkeypatch, caplog):
    import ray.experimental

    from otel_verl import job_board as board

    kv = types.ModuleType("ray.experimental.internal_kv")  # a Ray that renamed put and get only
    kv._internal_kv_initialized = lambda: True
    monkeypatch.setitem(sys.modules, "ray.experimental.internal_kv", kv)
    monkeypatch.setattr(ray.experimental, "internal_kv", kv, raising=False)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert board.publish("run-x", {"state": "stalled"}) is False
        assert board.read("run-x") is None
    assert "_internal_kv_put" in _said_once_with_versions(caplog, "ray")


# ------------------------------------------------------------------ verl: the worker actor's environment
def test_a_verl_without_wg_prefix_patches_no_worker_class(monkeypatch, caplog):
    from otel_verl.hooks import workers

    monkeypatch.delenv("WG_PREFIX", raising=False)
    monkeypatch.setenv("WG_BACKEND", "ray")  # set with it by verl's RayWorkerGroup
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert workers.in_worker_actor() is False
        assert workers.in_worker_actor() is False
    assert "WG_PREFIX" in _said_once_with_versions(caplog, "verl")
    monkeypatch.delenv("WG_BACKEND")
    assert workers.in_worker_actor() is False  # the driver: neither, nothing to say
    monkeypatch.setenv("WG_PREFIX", "abc")
    assert workers.in_worker_actor() is True


# ------------------------------------------------------------------ SDK: the tracer's sampler and id generator
def test_an_sdk_tracer_without_its_sampler_gets_no_promised_ids(caplog):
    from opentelemetry.sdk.trace import TracerProvider

    from otel_verl import propagation

    tracer = TracerProvider().get_tracer("t")
    del tracer.sampler
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert propagation.promise_span_id(tracer, 1, "verl.gen") is None
        assert propagation.promise_span_id(tracer, 1, "verl.gen") is None
    assert "Tracer.sampler" in _said_once_with_versions(caplog, "opentelemetry-sdk")
    assert not hasattr(tracer, "sampler")  # nothing put in its place


# ------------------------------------------------------------------ SDK: exporter resolution and preferences
def test_without_the_sdks_exporter_resolution_the_signal_is_off(monkeypatch, caplog):
    import opentelemetry.sdk._configuration as sdk_configuration

    from otel_verl.process import exporters

    monkeypatch.delattr(sdk_configuration, "_import_exporters")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert exporters.exporter_classes("traces") == {}
    assert "_import_exporters" in _said_once_with_versions(caplog, "opentelemetry-sdk")


def test_an_exporter_without_its_preferences_gets_the_readers_defaults(caplog):
    from opentelemetry.sdk.metrics.export import MetricExportResult

    from otel_verl.process.step_reader import StepMetricReader

    class Bare:  # a MetricExporter of a future SDK: no _preferred_* attributes
        def export(self, batch, **kwargs):
            return MetricExportResult.SUCCESS

        def shutdown(self, **kwargs):
            pass

    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        reader = StepMetricReader(Bare())  # type: ignore[arg-type]
    reader.shutdown(timeout_millis=1000)
    assert "_preferred_temporality" in _said_once_with_versions(caplog, "opentelemetry-sdk")


def test_no_private_name_is_read_around_private_api():
    """One rule in one place: a private attribute of someone else's object is read through
    ``otel_verl.private_api`` (the linter's own-private-access waiver is the tell-tale)."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "otel_verl"
    waived = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "noqa: SLF001" in line
    ]
    assert waived == []


# ------------------------------------------------------------------ Python: every thread's frames (stall stacks)
def test_without_sys_current_frames_there_are_no_stacks_and_no_error(monkeypatch, caplog):
    from otel_verl.stall import stacks

    monkeypatch.setattr(stacks, "sys", types.SimpleNamespace())  # not sys itself: others read it
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert stacks.format_stacks() == ""
    assert "sys._current_frames" in _said_once_with_versions(caplog, PYTHON)
