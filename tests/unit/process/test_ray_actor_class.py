"""``ray_actor_class`` must never start Ray: in the launcher it runs from an import hook (agent-loop
module) before verl's ``ray.init(**ray_kwargs)``; Ray's auto-init would start a default local cluster
and verl's own ``ray_kwargs`` (CPUs, GPUs, runtime_env) would be silently ignored. Seen with
``verl.experimental.fully_async_policy.fully_async_main``, which imports the agent loop at module level."""

from __future__ import annotations

import subprocess
import sys


def test_outside_ray_it_says_none_and_leaves_ray_uninitialized():
    # A fresh interpreter: another test of this session may have started Ray.
    code = (
        "import ray\n"
        "from otel_verl.process.resource import ray_actor_class\n"
        "assert ray_actor_class() is None\n"
        "print('initialized' if ray.is_initialized() else 'not initialized')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "not initialized"
