"""The instrumentor as ``opentelemetry-instrument`` and users drive it."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import types

import pytest

from otel_verl import VerlInstrumentor
from otel_verl.package import _instruments


def _targets():
    import ray
    import verl.trainer.ppo.ray_trainer as v0
    import verl.trainer.ppo.v1.trainer_base as v1
    import verl.utils.profiler.performance as perf
    import verl.utils.tracking as tracking

    return {
        "_timer": (perf, "_timer"),
        "Tracking.log": (tracking.Tracking, "log"),
        "v0.fit": (v0.RayPPOTrainer, "fit"),
        "v0.__init__": (v0.RayPPOTrainer, "__init__"),
        "v0._validate": (v0.RayPPOTrainer, "_validate"),
        "v1.fit": (v1.PPOTrainer, "fit"),
        "v1.init": (v1.PPOTrainer, "init"),
        "ray.init": (ray, "init"),
    }


def test_entry_points_are_registered():
    eps = importlib.metadata.entry_points(group="opentelemetry_instrumentor")
    assert [e.value for e in eps if e.name == "verl"] == ["otel_verl:VerlInstrumentor"]
    plugins = importlib.metadata.entry_points(group="verl.plugins")
    assert [e.value for e in plugins if e.name == "otel_verl"] == ["otel_verl._verl_plugin"]
    requires = importlib.metadata.requires("otel-verl")
    assert any(r.startswith("verl") and "extra == 'instruments'" in r.replace('"', "'") for r in requires)
    assert VerlInstrumentor().instrumentation_dependencies() == _instruments


def _layers(obj):
    """How many wrapt wrappers ``obj`` has, and what is under them."""
    n = 0
    while hasattr(obj, "_self_wrapper"):  # a wrapt FunctionWrapper
        obj, n = obj.__wrapped__, n + 1
    return n, obj


def _hooks_on(owner, attr) -> int:
    """How many of otel-verl's hooks target ``owner.attr`` (the guard shares some targets)."""
    from otel_verl.hooks import all_hooks

    name = attr if isinstance(owner, types.ModuleType) else f"{owner.__name__}.{attr}"
    module = owner.__name__ if isinstance(owner, types.ModuleType) else owner.__module__
    return sum(1 for h in all_hooks() if (h.module, h.target) == (module, name))


def test_instrument_and_uninstrument_restore_every_attribute_exactly():
    targets = _targets()
    before = {k: owner.__dict__[attr] for k, (owner, attr) in targets.items()}
    inst = VerlInstrumentor()
    inst.instrument()
    inst.instrument()  # idempotent: a second call changes nothing
    try:
        for key, (owner, attr) in targets.items():
            patched = owner.__dict__[attr]
            assert patched is not before[key], key
            layers, inner = _layers(patched)
            assert inner is before[key], key
            assert layers == _hooks_on(owner, attr) >= 1, key  # once per hook, not once per instrument()
    finally:
        inst.uninstrument()
    after = {k: owner.__dict__[attr] for k, (owner, attr) in targets.items()}
    assert after == before


def test_reinstrument_after_uninstrument_works():
    import verl.utils.profiler.performance as perf

    original = perf.__dict__["_timer"]
    inst = VerlInstrumentor()
    inst.instrument()
    inst.uninstrument()
    inst.instrument()
    try:
        assert _layers(perf.__dict__["_timer"]) == (_hooks_on(perf, "_timer"), original)
    finally:
        inst.uninstrument()
    assert perf.__dict__["_timer"] is original


_PROBE = """
import os, sys
import verl  # loads the verl.plugins entry points, as in every Ray worker
import verl.utils.profiler.performance as perf
print("PATCHED" if hasattr(perf._timer, "__wrapped__") else "PLAIN")
"""


def _probe(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(env_extra)
    env["OTEL_TRACES_EXPORTER"] = env["OTEL_METRICS_EXPORTER"] = "none"
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_verl_plugin_instruments_only_jobs_started_under_otel_verl():
    assert _probe({}) == "PLAIN"  # installing the package alone changes nothing
    assert _probe({"OTEL_VERL_RUN_ID": "r1"}) == "PATCHED"


def test_disabled_switches_are_respected_by_the_plugin():
    assert _probe({"OTEL_VERL_RUN_ID": "r1", "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "requests,verl"}) == "PLAIN"
    assert _probe({"OTEL_VERL_RUN_ID": "r1", "OTEL_SDK_DISABLED": "true"}) == "PLAIN"


_SITECUSTOMIZE_PROBE = """
import sys
heavy = ("opentelemetry.sdk", "otel_verl.hooks", "otel_verl.process.state", "otel_verl.stall", "yaml", "verl")
print("LOADED", *sorted(m for m in heavy if m in sys.modules))
import verl.utils.profiler.performance as perf
print("PATCHED" if hasattr(perf._timer, "__wrapped__") else "PLAIN")
"""


def test_under_opentelemetry_instrument_a_process_pays_only_when_it_imports_verl():
    """The job's Ray workers run OpenTelemetry's bootstrap (``process.worker_bootstrap``'s
    sitecustomize: no configurator, so no SDK even with opentelemetry-distro installed): there
    otel-verl only waits for ``import verl``; the hooks are in place before verl's first module."""
    from otel_verl.process.worker_bootstrap import SITE_DIR

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_VERL_RUN_ID": "r1", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "system_metrics"
    env["PYTHONPATH"] = SITE_DIR
    # inherited from a launcher (test below): a worker runs no configurator, so the file changes nothing here
    env["OTEL_CONFIG_FILE"] = os.devnull
    out = subprocess.run(
        [sys.executable, "-c", _SITECUSTOMIZE_PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "LOADED", lines  # nothing heavy before verl is imported
    assert lines[-1] == "PATCHED"
    assert "OTEL_CONFIG_FILE" not in out.stderr, out.stderr  # the launcher said it, once for the job


def test_a_launcher_with_otel_config_file_is_instrumented_and_says_once_what_the_file_does_not_do(tmp_path):
    """``OTEL_CONFIG_FILE`` set and no ``opentelemetry-configuration``: OpenTelemetry's bootstrap
    raises in its configurator and loads no instrumentor; verl's plugin starts otel-verl anyway,
    and one warning says that verl's telemetry follows the ``OTEL_*`` variables, not the file."""
    from otel_verl import declarative_config

    if declarative_config._reader_installed():
        pytest.skip("opentelemetry-configuration is installed: the bootstrap reads the file and does not fail")
    config_file = tmp_path / "otel.yaml"
    config_file.write_text('file_format: "1.0"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_CONFIG_FILE": str(config_file), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
    env["OTEL_LOGS_EXPORTER"] = "none"
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "system_metrics"
    instrument = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    probe = _SITECUSTOMIZE_PROBE + "import os; print('RUN', bool(os.environ.get('OTEL_VERL_RUN_ID')))\n"
    out = subprocess.run(
        [instrument, sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["PATCHED", "RUN True"], out.stdout + out.stderr
    said = [line for line in out.stderr.splitlines() if "otel-verl: OTEL_CONFIG_FILE is set" in line]
    assert len(said) == 1 and "OTEL_* variables" in said[0] and "no other instrumentation" in said[0], out.stderr


def test_public_names_load_on_first_use():
    import otel_verl

    assert {"VerlInstrumentor", "current_step", "current_epoch", "step_attributes"} <= set(dir(otel_verl))
    from otel_verl import current_step, step_attributes

    assert current_step() is None and step_attributes() == {}
    assert otel_verl.VerlInstrumentor is VerlInstrumentor
    with pytest.raises(AttributeError):
        otel_verl.no_such_name  # noqa: B018


def test_the_verl_import_trigger_fires_once_and_never_breaks_the_import():
    from otel_verl.instrumentor import _OnVerlImport

    calls = []

    def activate():
        calls.append(1)
        raise RuntimeError("a broken hook module")  # logged; verl's import goes on

    trigger = _OnVerlImport(activate)
    sys.meta_path.insert(0, trigger)
    try:
        assert trigger.find_spec("ray") is None and calls == []
        assert trigger.find_spec("verl") is None and calls == [1]
        assert trigger not in sys.meta_path
        assert trigger.find_spec("verl.utils") is None and calls == [1]
    finally:
        trigger.remove()
