"""End-to-end: ``otel_verl.overhead.cpu_time`` on a real verl run (v0 GRPO, 2 steps, on CPU).

Every verl process that exports metrics reports otel-verl's own CPU, the counter never goes
back, and it is consistent with an external measure: the process's whole CPU time
(``process.cpu.time``, psutil, read in the same collections) bounds it from above at every
export, and our share of it stays plausible (below 30%; measured in the steps: worker rank 2%,
agent-loop worker 8-11%, TaskRunner, which mostly waits on Ray, 12-17%: bench/README.md).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from otel_verl import semconv
from otel_verl.offline.run.model import build
from otel_verl.offline.values import INSTANCE

pytestmark = pytest.mark.e2e

MAX_SHARE = 0.3  # otel-verl's CPU / the process's CPU over the run, per process
CPU_ROLES = {semconv.ROLE_TASKRUNNER, semconv.ROLE_WORKER, semconv.ROLE_AGENT_LOOP}  # those export process.cpu.time


@pytest.fixture(scope="module")
def run(verl_runs):
    result = verl_runs.get("v0", "grpo", steps=2)  # the same cached run as test_verl_cpu's v0-grpo
    assert result.returncode == 0, result.output[-4000:]
    return result


def _series(run, name: str, key: str) -> dict[tuple[str, str], list[tuple[int, float]]]:
    out: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for p in run.points:
        if p.name == name and p.value is not None:
            out[(p.resource[INSTANCE], str(p.attributes.get(key)))].append((p.time_ns, p.value))
    return {k: sorted(v) for k, v in out.items()}


def _role(run, instance: str) -> str:
    return next(p.resource[semconv.RES_ROLE] for p in run.points if p.resource.get(INSTANCE) == instance)


def test_every_verl_process_that_exports_metrics_reports_its_own_cost(run):
    exporting = {p.resource[INSTANCE] for p in run.points}
    own = _series(run, semconv.M_OVERHEAD_CPU_TIME, semconv.ATTR_OVERHEAD_COMPONENT)
    reporting = {who for who, _ in own}
    assert reporting == exporting
    roles = {_role(run, who) for who in reporting}
    assert {semconv.ROLE_TASKRUNNER, semconv.ROLE_WORKER, semconv.ROLE_AGENT_LOOP} <= roles
    for who in reporting:
        components = {c for w, c in own if w == who}
        assert set(semconv.OVERHEAD_COMPONENTS) <= components, (who, components)
        last = {c: own[(who, c)][-1][1] for c in components}
        assert last[semconv.COMPONENT_HOOKS] > 0, who  # every one of them ran hooks
        assert last[semconv.COMPONENT_EXPORTER] + last[semconv.COMPONENT_RECORDER] > 0, who
    runner = next(w for w in reporting if _role(run, w) == semconv.ROLE_TASKRUNNER)
    assert own[(runner, semconv.COMPONENT_RECORDER)][-1][1] > 0  # the step recorder lives there
    assert own[(runner, semconv.COMPONENT_WATCHDOG)][-1][1] > 0  # and the stall watchdog


def test_the_counter_is_monotonic_over_the_steps(run):
    own = _series(run, semconv.M_OVERHEAD_CPU_TIME, semconv.ATTR_OVERHEAD_COMPONENT)
    for key, points in own.items():
        values = [v for _, v in points]
        assert values == sorted(values), key
    runner = next(w for w, _ in own if _role(run, w) == semconv.ROLE_TASKRUNNER)
    assert len(own[(runner, semconv.COMPONENT_HOOKS)]) >= 3  # validation and each of the 2 steps
    total = [sum(own[(runner, c)][i][1] for c in semconv.OVERHEAD_COMPONENTS) for i in range(3)]
    assert total[0] < total[1] < total[2]


def test_the_processs_own_cpu_time_bounds_it_and_our_share_is_plausible(run):
    own = _series(run, semconv.M_OVERHEAD_CPU_TIME, semconv.ATTR_OVERHEAD_COMPONENT)
    cpu = _series(run, "process.cpu.time", "cpu.mode")
    checked: set[str] = set()
    for who in {w for w, _ in own}:
        proc = defaultdict(float)  # time -> user + system CPU seconds of the whole process
        for (w, _), points in cpu.items():
            if w == who:
                for t, v in points:
                    proc[t] += v
        if not proc:  # the reward worker registers no process.* metrics
            assert _role(run, who) not in CPU_ROLES, f"{who}: no process.cpu.time (otel-verl[system] is installed)"
            continue
        checked.add(_role(run, who))
        ours = defaultdict(float)
        for (w, _), points in own.items():
            if w == who:
                for t, v in points:
                    ours[t] += v
        for t, value in ours.items():
            later = [proc[u] for u in sorted(proc) if u >= t]
            if later:  # the process had used at least what our threads and hooks had, when read just after
                assert value <= later[0] * 1.01 + 0.01, (who, t, value, later[0])
        times = sorted(set(ours) & set(proc))
        if len(times) >= 2:
            share = (ours[times[-1]] - ours[times[0]]) / max(proc[times[-1]] - proc[times[0]], 1e-9)
            assert 0 < share < MAX_SHARE, (_role(run, who), share)
    assert checked >= CPU_ROLES


def test_summary_and_report_state_the_cost_per_step(run):
    rep = build(run.telemetry_dir)
    assert rep.overhead is not None and sorted(rep.overhead.per_step) == [r.step for r in rep.steps]
    assert all(v > 0 for v in rep.overhead.per_step.values())
    line = rep.overhead_line()
    assert line is not None and line.startswith("telemetry cost per step: ")
    assert rep.overhead.processes == len({p.resource[INSTANCE] for p in run.points})
    # the same figure stays below MAX_SHARE of what those processes burnt in each step
    for step, cost in rep.overhead.per_step.items():
        if rep.overhead.process_cpu.get(step):
            assert cost < MAX_SHARE * rep.overhead.process_cpu[step] + 0.05, (step, cost)
