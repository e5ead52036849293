"""opskit's wait for a background ``scripts/backends.sh`` build: bounded by a deadline counted from
the test session's start, and a build still running then is a missing component (a failure under
CI, a skip on a workstation)."""

from __future__ import annotations

import fcntl
import time

import pytest
from support import opskit


@pytest.fixture
def building(tmp_path, monkeypatch):
    """A backends folder whose build holds its lock (as scripts/backends.sh does while it runs)."""
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path))
    with open(tmp_path / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield tmp_path


def test_no_build_running_means_no_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path))
    assert opskit.wait_for_backend_build(deadline=time.monotonic() - 1) is True  # no lock file
    (tmp_path / ".lock").touch()
    assert opskit.wait_for_backend_build(deadline=time.monotonic() - 1) is True  # nobody holds it


def test_the_wait_ends_at_the_deadline_after_the_session_start(building, monkeypatch):
    started = time.monotonic()
    assert opskit.wait_for_backend_build(deadline=started + 0.5) is False
    assert time.monotonic() - started < 30  # it did not wait for the build
    monkeypatch.setattr(opskit, "BACKENDS_DEADLINE_S", time.monotonic() - opskit.SESSION_START - 1)
    assert opskit.wait_for_backend_build() is False  # the default deadline: already past


def test_a_build_still_running_at_the_deadline_fails_under_ci_and_skips_otherwise(building, monkeypatch):
    monkeypatch.setattr(opskit, "BACKENDS_DEADLINE_S", 0.0)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="still building"):
        opskit.stack_bin_dir()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="still building"):
        opskit.stack_bin_dir()


def test_missing_binaries_fail_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_BACKENDS_DIR", str(tmp_path))  # built nothing
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing the live stack's backends"):
        opskit.stack_bin_dir()
