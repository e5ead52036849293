"""The harness's opt-in fault injection (``VERL_CPU_HARNESS_KILL_AT``), without a trainer run."""

from __future__ import annotations

import types

import pytest
from support.components import require_harness

require_harness()
from verl_cpu_harness import plugin  # noqa: E402


@pytest.mark.parametrize(
    ("raw", "spec"),
    [
        ("compute_log_prob:2", ("compute_log_prob", 2)),
        ("update_actor:1", ("update_actor", 1)),
        ("", None),
        ("compute_log_prob", None),
        ("compute_log_prob:0", None),
        ("compute_log_prob:x", None),
        (":3", None),
    ],
)
def test_kill_spec(monkeypatch, raw, spec):
    monkeypatch.setenv(plugin.KILL_AT, raw)
    assert plugin._kill_spec() == spec


def test_kill_switch_exits_at_the_nth_call_and_keeps_verl_metadata(monkeypatch):
    class ActorRolloutRefWorker:
        def compute_log_prob(self, data):
            return data * 2

    ActorRolloutRefWorker.compute_log_prob.verl_register = "dispatch"  # stands in for @register's attribute
    module = types.SimpleNamespace(ActorRolloutRefWorker=ActorRolloutRefWorker)
    exits = []
    monkeypatch.setattr(plugin.os, "_exit", exits.append)
    monkeypatch.setenv(plugin.KILL_AT, "compute_log_prob:3")
    plugin._install_kill_switch(module)
    plugin._install_kill_switch(module)  # twice (two import hooks): still one counter
    worker = ActorRolloutRefWorker()
    assert [worker.compute_log_prob(1), worker.compute_log_prob(2)] == [2, 4] and exits == []
    worker.compute_log_prob(3)
    assert exits == [1]
    assert ActorRolloutRefWorker.compute_log_prob.verl_register == "dispatch"
    assert ActorRolloutRefWorker.compute_log_prob.__name__ == "compute_log_prob"
