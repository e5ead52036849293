"""A verl outside the tested range (``otel_verl.untested``): ``opentelemetry-instrument`` skips the
instrumentor, otel-verl starts anyway and says so, unless told not to.

Each case is a real ``opentelemetry-instrument`` process; the verl it sees is the installed one, its
version made the next release's by a ``verl-0.10.0.dist-info`` first on ``PYTHONPATH`` (what
``importlib.metadata`` and OpenTelemetry's dependency check read).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_verl import config, untested

NEXT = "0.10.0"
PROBE = (
    "import os; from otel_verl import VerlInstrumentor; "
    "print('run_id', bool(os.environ.get('OTEL_VERL_RUN_ID'))); "
    "print('instrumented', VerlInstrumentor().is_instrumented_by_opentelemetry)"
)


def _next_verl(tmp_path: Path) -> Path:
    site = tmp_path / "next-verl"
    info = site / f"verl-{NEXT}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {NEXT}\n")
    return site


def _instrumented(tmp_path: Path, site: Path | None, **env: str) -> tuple[dict[str, str], str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    paths = [str(site)] if site else []
    paths += [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    run_env = {
        **base,
        "PYTHONPATH": os.pathsep.join(paths),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_VERL_FILE_DIR": str(tmp_path / "telemetry"),
        **env,
    }
    exe = Path(sys.executable).with_name("opentelemetry-instrument")
    out = subprocess.run(
        [str(exe), sys.executable, "-c", PROBE], env=run_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    state = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    return state, out.stderr


def test_on_the_next_verl_otel_verl_starts_and_says_so(tmp_path):
    state, err = _instrumented(tmp_path, _next_verl(tmp_path))
    assert state == {"run_id": "True", "instrumented": "True"}
    assert f"verl {NEXT} is outside the range it was tested with" in err
    assert config.UNTESTED_VERL in err  # and how to turn it off
    assert err.count("is outside the range") == 1


def test_untested_verl_off_keeps_otel_verl_off_and_says_so(tmp_path):
    state, err = _instrumented(tmp_path, _next_verl(tmp_path), **{config.UNTESTED_VERL: "false"})
    assert state == {"run_id": "False", "instrumented": "False"}
    assert f"verl {NEXT} is outside the range" in err and "otel-verl is off" in err


def test_the_kill_switch_wins_on_an_untested_verl_too(tmp_path):
    state, err = _instrumented(tmp_path, _next_verl(tmp_path), OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="verl")
    assert state == {"run_id": "False", "instrumented": "False"}
    assert "is outside the range" not in err


def test_on_the_tested_verl_nothing_changes(tmp_path):
    state, err = _instrumented(tmp_path, None)
    assert state == {"run_id": "True", "instrumented": "True"}
    assert "is outside the range" not in err


@pytest.mark.parametrize(("version", "outside"), [("0.9.1", False), ("0.10.0.dev0", True), ("0.9.0", True)])
def test_untested_version_reads_the_tested_range(monkeypatch, version, outside):
    monkeypatch.setattr("otel_verl.package.installed_version", lambda dist: version)
    assert untested.untested_version() == (version if outside else None)


def test_no_verl_installed_is_not_an_untested_verl(monkeypatch):
    monkeypatch.setattr("otel_verl.package.installed_version", lambda dist: None)
    assert untested.untested_version() is None


def test_a_worker_starts_without_saying_it_again(tmp_path):
    """A Ray worker of the job (otel-verl's worker bootstrap, the run id from the launcher) starts on
    the untested verl too; the launcher's line is not repeated in each worker."""
    from otel_verl.process.worker_bootstrap import SITE_DIR

    _, err = _instrumented(tmp_path, _next_verl(tmp_path), OTEL_VERL_RUN_ID="run-from-the-launcher")
    assert "is outside the range" in err  # the launcher: said
    worker_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    paths = [SITE_DIR, str(_next_verl(tmp_path / "w"))] + [
        p for p in worker_env.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    worker_env.update(
        {
            "PYTHONPATH": os.pathsep.join(paths),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_VERL_RUN_ID": "run-from-the-launcher",
        }
    )
    out = subprocess.run([sys.executable, "-c", PROBE], env=worker_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)["instrumented"] == "True"
    assert "is outside the range" not in out.stderr, out.stderr[-2000:]
