"""``hooks.compat``: a target that exists with another shape is skipped, not wrapped; each process
says once, in one table with the versions, which hooks applied and which did not; ``targets.TARGETS``
describes every hook (that every shape it names is the installed verl's: ``otel-verl doctor``'s
test of every real hook, tests/unit/live/test_live_doctor.py, which judges with the same ``check``)."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from otel_verl.hooks import all_hooks, compat, targets
from otel_verl.hooks.hookset import Hook, HookSet
from otel_verl.process.state import PROCESS
from otel_verl.version import __version__

MOD = "otel_verl_test_shapes"


def _wrapper(wrapped, instance, args, kwargs):
    return ("wrapped", wrapped(*args, **kwargs))


@pytest.fixture
def module(monkeypatch):
    mod = types.ModuleType(MOD)

    class Trainer:
        def log(self, data, step):  # the shape expected
            return "real"

        def renamed(self, payload, step):  # "data" renamed
            return "real"

        async def now_async(self, data):
            return "real"

    class NotAClass:
        def method(self, data):
            return "real"

    mod.Trainer, mod.Gone = Trainer, NotAClass()  # ``Gone`` is an instance now, no longer a class
    sys.modules[MOD] = mod
    shapes = {
        "Trainer.log": targets.Shape(("data", "step"), coroutine=False),
        "Trainer.renamed": targets.Shape(("data", "step")),
        "Trainer.now_async": targets.Shape(("data",), coroutine=False),
        "Gone.method": targets.Shape(("data",)),
    }
    for name, shape in shapes.items():
        target = targets.Target(MOD, name, targets.PRIVATE, "verl 0.9.0", shape)
        monkeypatch.setitem(targets._BY_KEY, target.key, target)
    yield mod
    del sys.modules[MOD]


def _said(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("otel-verl ")]


def test_a_target_with_another_shape_is_skipped_not_wrapped_and_said_in_one_table(module, caplog):
    names = ("Trainer.log", "Trainer.renamed", "Trainer.now_async", "Gone.method")
    hooks = HookSet([Hook(MOD, name, _wrapper) for name in names])
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        hooks.install()
        assert module.Trainer().log(1, 2) == ("wrapped", "real")  # the right shape: wrapped
        assert module.Trainer().renamed(1, 2) == "real"  # the others: left alone
        assert module.Gone.method(1) == "real"
        compat.REPORT.say()
        compat.REPORT.say()
    (record,) = _said(caplog)
    text = record.getMessage()
    assert record.levelno == logging.WARNING  # a hook was skipped
    assert text.splitlines()[0].endswith("hooks 1 applied, 3 skipped")
    assert "shape: Trainer.renamed has no parameter 'data'" in text
    assert "shape: Trainer.now_async is now async" in text
    assert "shape: Gone is no longer a class" in text
    assert f"applied  {MOD}: Trainer.log" in text and "[patch, private name, since verl 0.9.0]" in text
    hooks.uninstall()


def test_the_table_is_said_when_the_process_telemetry_starts_quietly_when_all_applied(module, caplog):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    hooks = HookSet([Hook(MOD, "Trainer.log", _wrapper), Hook("otel_verl_never_imported", "f", _wrapper)])
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        hooks.install()
        assert _said(caplog) == []  # not before this process makes telemetry
        PROCESS.use_providers(TracerProvider(), MeterProvider())  # the pipeline is built on first use
        try:
            PROCESS.telemetry  # noqa: B018 - the first use
            PROCESS.telemetry  # noqa: B018
        finally:
            PROCESS.use_providers(None, None)
    (record,) = _said(caplog)
    assert record.levelno == logging.INFO  # tested verl, nothing skipped: nothing to warn about
    first = record.getMessage().splitlines()[0]
    assert first.startswith(f"otel-verl {__version__} on verl ") and first.endswith("hooks 1 applied, 1 not loaded")
    hooks.uninstall()


def test_on_an_untested_verl_the_table_is_a_warning(module, monkeypatch, caplog):
    monkeypatch.setattr("otel_verl.package.installed_version", lambda dist: "0.10.0")
    monkeypatch.setattr("otel_verl.package.package_version", lambda dist: "0.10.0")
    hooks = HookSet([Hook(MOD, "Trainer.log", _wrapper)])
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        hooks.install()
        compat.REPORT.say()
    (record,) = _said(caplog)
    assert record.levelno == logging.WARNING
    assert "on verl 0.10.0 (untested; tested: verl >= 0.9.1, < 0.10): hooks 1 applied" in record.getMessage()
    hooks.uninstall()


def test_a_hook_skipped_after_the_table_was_said_is_said_in_one_more_line(module, caplog):
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        hooks = HookSet([Hook(MOD, "Trainer.log", _wrapper)])
        hooks.install()
        compat.REPORT.say()
        late = HookSet([Hook(MOD, "Trainer.renamed", _wrapper)])
        late.install()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[-1].startswith("otel-verl: also skipped in this process: skipped  otel_verl_test_shapes.")
    assert len(_said(caplog)) == 1
    hooks.uninstall()


def test_every_hook_has_its_target_described_and_each_target_is_hooked():
    keys = {f"{h.module}.{h.target}" for h in all_hooks()}
    assert keys == {t.key for t in targets.TARGETS}
    assert all(t.mechanism in targets.MECHANISMS and t.since for t in targets.TARGETS)
