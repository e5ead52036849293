"""``otel_verl.per_process``: every piece of per-process state known in one place, one ``reset()``
that makes the process as just started, one fork handler that runs every module's ``after_fork``."""

from __future__ import annotations

import logging
import os

from opentelemetry.sdk._logs import LoggerProvider

from otel_verl import per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.hooks import accounting, compat
from otel_verl.process import logs
from otel_verl.process.state import PROCESS
from otel_verl.spool import exporters, stats, store
from otel_verl.stall import reporter


def test_reset_makes_the_process_as_just_started(caplog):
    PROCESS.identify(role=semconv.ROLE_LAUNCHER)  # as the stall reporter names a process no hook named
    PROCESS.use_providers(object(), object())
    stats.count("traces", "spooled", 10)
    warn_once("per-process test", "said once")
    handler = logs.attach(LoggerProvider())  # a pipeline's: dropped with it, its handler goes too
    assert handler in logging.getLogger().handlers
    per_process.reset()
    assert handler not in logging.getLogger().handlers
    assert PROCESS.identity.role == semconv.ROLE_UNKNOWN and not PROCESS.built
    assert stats.counts() == {}
    assert reporter.REPORTER.seen is None
    caplog.clear()
    warn_once("per-process test", "said once")
    assert [r.getMessage() for r in caplog.records] == ["otel-verl: said once"]


def test_every_module_with_state_registers_once_at_import_in_import_order():
    names = per_process.registered()
    for module in (store, stats, exporters, compat, accounting, PROCESS.__class__.__module__):
        name = module if isinstance(module, str) else module.__name__
        assert names.count(name) == 1
    # the fork handlers of the spool run as before: the store's (and its counts) before the exporters'
    assert names.index(stats.__name__) < names.index(store.__name__) < names.index(exporters.__name__)


def test_one_fork_handler_runs_each_after_fork_in_order_past_one_that_fails(monkeypatch):
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("broken")

    monkeypatch.setattr(per_process, "_STATES", dict(per_process._STATES))  # this test's own entries
    per_process.register("test.first", after_fork=failing)
    per_process.register("test.second", after_fork=lambda: ran.append("second"))
    per_process.register("test.reset_only", reset=lambda: ran.append("reset"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what ran after the fork, through the pipe
        try:
            os.write(write, ",".join(ran).encode())
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert got == "failing,second"
    assert ran == []  # the parent ran none


def test_only_this_module_registers_a_fork_handler():
    import otel_verl

    root = os.path.dirname(otel_verl.__file__)
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if "register_at_fork(" in f.read():
                        found.append(os.path.relpath(path, root))
    assert found == ["per_process.py"]
