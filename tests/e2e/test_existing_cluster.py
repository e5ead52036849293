"""End-to-end on a Ray cluster that was already running (``ray start``), as on KubeRay/Slurm:
``cluster_run`` (tests/e2e/conftest.py says how the cluster is started and the job submitted)."""

from __future__ import annotations

import pytest

from otel_verl import semconv

pytestmark = pytest.mark.e2e


def test_instrumented_job_on_a_running_cluster(ray_cluster, cluster_run):
    run = cluster_run
    assert run.returncode == 0, run.output[-4000:]
    assert f"Connecting to existing Ray cluster at address: {ray_cluster}" in run.output
    roles = {s.resource.get(semconv.RES_ROLE) for s in run.spans}
    # the TaskRunner, the worker ranks and the agent-loop worker all exported spans
    assert semconv.ROLE_TASKRUNNER in roles
    assert semconv.ROLE_WORKER in roles
    assert semconv.ROLE_AGENT_LOOP in roles
    run_ids = {s.resource.get(semconv.RES_RUN_ID) for s in run.spans}
    assert len(run_ids) == 1 and None not in run_ids
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(steps) == [1, 2]
    step_traces = {s.trace_id for s in steps.values()}
    workers = [s for s in run.spans if s.name.startswith(semconv.SPAN_WORKER_PREFIX) and s.trace_id in step_traces]
    assert workers
    trajs = [
        s
        for s in run.spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert len(trajs) == 16 and {s.trace_id for s in trajs} == step_traces
