"""``HookSet``: wrappers and replacements applied on import, removed exactly; what applied and what
did not (a missing target, one with another shape) said once per process in one table
(``hooks.compat``), with the version of the package that owns the target."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from otel_verl.hooks import compat
from otel_verl.hooks.hookset import Hook, HookSet, package_version


@pytest.fixture
def module():
    mod = types.ModuleType("otel_verl_test_target")

    class Thing:
        def method(self):
            return "real"

    def func():
        return "real"

    mod.Thing, mod.func = Thing, func
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def test_replace_hook_swaps_the_attribute_and_uninstall_restores_it(module):
    original = module.func
    hooks = HookSet([Hook(module.__name__, "func", lambda orig: lambda: "traced " + orig(), replace=True)])
    hooks.install()
    assert module.func() == "traced real"
    hooks.uninstall()
    assert module.func is original


def _table(caplog) -> str:
    compat.REPORT.say()
    (table,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("otel-verl ")]
    return table


def test_a_replacement_that_does_not_fit_is_said_once_in_the_table(module, caplog):
    hooks = HookSet([Hook(module.__name__, "func", lambda orig: None, replace=True)])
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        hooks.install()
        hooks.uninstall()
        hooks.install()
        table = _table(caplog)
        compat.REPORT.say()  # once
    assert "hooks 1 skipped" in table and "skipped  otel_verl_test_target.func" in table
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert module.func() == "real"
    hooks.uninstall()


def test_a_missing_private_ray_name_reports_rays_version(caplog):
    import ray._private.function_manager as fm

    hook = Hook("ray._private.function_manager", "_renamed_in_a_future_ray", lambda *a: None)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        HookSet([hook]).install()
        table = _table(caplog)
    assert f"_renamed_in_a_future_ray missing in ray {package_version('ray')}" in table
    assert package_version("ray") != "unknown" and hasattr(fm, "_inject_tracing_into_class")


def test_wrap_hook_on_a_method(module):
    hooks = HookSet([Hook(module.__name__, "Thing.method", lambda wrapped, inst, a, k: "wrapped " + wrapped())])
    hooks.install()
    assert module.Thing().method() == "wrapped real"
    hooks.uninstall()
    assert module.Thing().method() == "real"
