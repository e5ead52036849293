"""The instrumentor as ``opentelemetry-instrument`` and users drive it."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import types

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
