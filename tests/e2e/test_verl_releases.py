"""End-to-end: the real trainer on an older verl release, verl 0.9.0 (v1 driver, GRPO, 2 steps).

The compatibility matrix's older-release cell (``support.compat``): verl 0.9.0's files put first on
``PYTHONPATH`` over the venv's verl 0.9.1 and its dependencies (``scripts/setup.sh`` installs them
in ``<venv>/verl-releases/0.9.0``). 0.9.0 is outside the range otel-verl declares, so the run also
shows the untested path on a real release, not only on a simulated one: said once per process,
every hook applied (0.9.0 has every name otel-verl hooks, with the same shapes), the telemetry whole.
One real run: ~60 s of CI.
"""

from __future__ import annotations

import os
import re

import pytest
from support import compat
from support.components import require_verl_release
from support.points import step_values

pytestmark = pytest.mark.e2e

RELEASE = "0.9.0"
STEPS = 2
TABLE = re.compile(r"otel-verl \S+ on verl (\S+) \(untested; tested: [^)]*\): hooks (.*)$")


@pytest.fixture(scope="module")
def run(verl_runs):
    overlay = require_verl_release(RELEASE)
    path = os.pathsep.join([str(overlay), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    result = verl_runs.get("v1", "grpo", steps=STEPS, env={"PYTHONPATH": path})
    assert result.returncode == 0, result.output[-4000:]
    return result


def test_compatibility_cell(run):
    """This run is its cell of the compatibility matrix (docs/generated/compatibility.md)."""
    compat.check(run, "0.9.0-v1-hf")


def test_the_release_is_said_untested_and_every_hook_applied(run):
    assert f"verl {RELEASE} is outside the range it was tested with" in run.output
    heads = [m.groups() for line in run.output.splitlines() if (m := TABLE.search(line))]
    assert len(heads) >= 3, run.output[-3000:]  # the launcher, the TaskRunner, the workers
    assert {version for version, _ in heads} == {RELEASE}
    for _, counts in heads:
        assert "applied" in counts and "skipped" not in counts, counts


def test_every_logged_value_is_exported_each_step(run):
    for n in range(1, STEPS + 1):
        exported, logged = step_values(run, n)
        missing = [name for name, v in logged.items() if exported.get(name) != pytest.approx(v, rel=1e-6)]
        assert not missing, missing[:20]
