"""python -m verl_cpu_harness --workdir DIR [--driver v1|v0] [--algo grpo|ppo] [--rollout hfcpu|vllm]
[--python PATH] [--steps N] [--n-gpus N] [--launcher "opentelemetry-instrument"] [--timeout S] [--progress]
[-- extra Hydra overrides]

Makes the assets in DIR and runs ``[launcher] python -m verl.trainer.main_ppo <overrides>``
with cwd=DIR, streaming its output (always saved to DIR/run.log; with --progress only one line
per phase and step is printed); exits with its exit code.
"""

from __future__ import annotations

import argparse
import sys

from .progress import Progress
from .runner import run_verl


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m verl_cpu_harness", description=__doc__.split("\n\n")[1])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--driver", choices=["v1", "v0"], default="v1")
    parser.add_argument("--algo", choices=["grpo", "ppo"], default="grpo")
    parser.add_argument("--rollout", choices=["hfcpu", "vllm"], default="hfcpu")
    parser.add_argument("--python", default=None, help="the run's interpreter (vllm: the venv of scripts/vllm_cpu.sh)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--n-gpus", type=int, default=1)
    parser.add_argument("--no-val-before-train", dest="val_before_train", action="store_false")
    parser.add_argument("--test-freq", type=int, default=-1)
    parser.add_argument("--launcher", default=None, help="words placed before python, e.g. opentelemetry-instrument")
    parser.add_argument("--timeout", type=float, default=None, help="seconds; on expiry the run is killed (exit 124)")
    parser.add_argument("--progress", action="store_true", help="one line per phase and step instead of verl's log")
    ns = parser.parse_args(argv)
    stream = sys.stdout
    if ns.progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the assets' "Writing model shards" bar: one line per phase only
        stream = Progress(ns.steps)
        stream.say("start", "making a tiny random model and its data, then starting verl")
    result = run_verl(
        ns.workdir,
        driver=ns.driver,
        algo=ns.algo,
        rollout=ns.rollout,
        python=ns.python,
        steps=ns.steps,
        n_gpus=ns.n_gpus,
        val_before_train=ns.val_before_train,
        test_freq=ns.test_freq,
        extra=extra,
        launcher=ns.launcher,
        timeout=ns.timeout,
        stream=stream,
    )
    print(f"[verl_cpu_harness] exit={result.returncode} wall={result.wall_s:.1f}s", file=sys.stderr, flush=True)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
