"""Memory stays flat with the endpoint down: every queue between training and export is bounded.

A short version of ``bench/soak_memory.py`` (its ``dead`` case of ``verl_cpu_harness.soak``, in a
subprocess for a clean RSS): 1500 synthetic steps through verl's own ``marked_timer`` and ``Tracking.log`` with
otel-verl active and OTLP/gRPC exporters to a port that refuses connections. Per step: 14 spans
(step, 10 stages, 3 worker-group calls), 100 logged keys, one step-boundary metric batch.

Bound: the queues fill within the first ~150 steps (2048 spans / 14 per step; 32 metric batches)
and cannot grow after that (tracemalloc: what is alive then is the span queue plus the batch in
export, ~2560 spans of ~3.8 KiB, and 32 metric batches of ~22 KiB). So from step 500 on, RSS may
only move by allocator noise (the 10k-step soak in bench/README.md saw one +6 MiB step with the
gRPC exporter failing, and +0.5 KiB per step that verl's own ``codetiming`` timers keep with or
without otel-verl). Keeping one step's spans (~50 KiB) or one metric batch (~22 KiB) per step
would add 20-50 MiB over the 1000 measured steps: the bound is 16 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys

from verl_cpu_harness import soak

STEPS = 1500
WARM_UP = 500
EVERY = 250
BOUND_MIB = 16.0


def test_rss_and_queues_stay_bounded_with_the_endpoint_down(tmp_path):
    from otel_verl.process.step_reader import MAX_PENDING

    cmd = [sys.executable, "-m", "verl_cpu_harness.soak", "dead"]
    cmd += ["--steps", str(STEPS), "--every", str(EVERY)]
    proc = subprocess.run(cmd, env=soak.env("dead", str(tmp_path)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = {s["step"]: s for s in map(json.loads, filter(None, proc.stdout.splitlines()))}
    assert set(samples) >= {1, WARM_UP, STEPS}
    growth = samples[STEPS]["rss_mib"] - samples[WARM_UP]["rss_mib"]
    worst = samples[STEPS]["worst"]
    by_step = ", ".join(f"{k}: {v['rss_mib']:.1f}" for k, v in sorted(samples.items()))
    print(f"\nRSS MiB by step: {by_step}; growth {WARM_UP}->{STEPS}: {growth:+.1f} MiB; queues worst {worst}")
    assert growth <= BOUND_MIB, growth
    # the queues are the bounded ones, they did fill (the endpoint really was down), never beyond
    assert worst["spans0_max"] == 2048 and worst["metrics0_max"] == MAX_PENDING and worst["logs0_max"] == 2048
    assert worst["spans0"] == worst["spans0_max"] and worst["metrics0"] == worst["metrics0_max"]
    assert worst["metrics0_dropped"] > 0
    for name, value in worst.items():
        if not name.endswith(("_max", "_dropped")):
            assert value <= worst[f"{name}_max"], name
