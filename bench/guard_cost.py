"""What the guard's decision costs the training thread per step, next to verl's own logging of
the same step: ``Evaluator.step`` on a 100-key dict (the built-in rules, 20-step windows filled)
against verl's ``Tracking.log`` of that dict to its console backend, measured side by side."""

from __future__ import annotations

import contextlib
import io
import random
import statistics
import timeit

from otel_verl.hooks.guard.rules import Evaluator, load_rules

KEYS = (
    [f"actor/extra_{i}" for i in range(80)]
    + [
        "actor/pg_loss",
        "actor/kl_loss",
        "actor/ppo_kl",
        "actor/grad_norm",
        "actor/entropy",
        "critic/score/mean",
        "critic/rewards/mean",
        "critic/vf_loss",
        "critic/grad_norm",
        "perf/throughput",
    ]
    + [f"timing_s/stage_{i}" for i in range(10)]
)


def main() -> None:
    from verl.utils.tracking import Tracking

    rng = random.Random(0)
    steps = [{k: rng.random() for k in KEYS} for _ in range(200)]
    evaluator = Evaluator(load_rules())
    for i, values in enumerate(steps[:50]):  # fill the windows
        evaluator.step(values, i)
    tracking = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    i = [0]

    def guard() -> None:
        i[0] += 1
        evaluator.step(steps[i[0] % 200], i[0])

    def verl_log() -> None:
        i[0] += 1
        with contextlib.redirect_stdout(io.StringIO()):
            tracking.log(data=steps[i[0] % 200], step=i[0])

    rounds = {"guard": [], "verl": []}
    for _ in range(7):  # alternate, so that machine noise hits both
        rounds["guard"].append(timeit.timeit(guard, number=500) / 500)
        rounds["verl"].append(timeit.timeit(verl_log, number=500) / 500)
    g, v = statistics.median(rounds["guard"]), statistics.median(rounds["verl"])
    print(f"guard decision per step ({len(KEYS)} keys): {g * 1e6:.0f} us (median of 7 rounds)")
    print(f"verl Tracking.log, console backend:        {v * 1e6:.0f} us")
    print(f"ratio guard / verl's own logging:          {g / v:.2f}")


if __name__ == "__main__":
    main()
