"""Real verl runs on CPU: the ``verl_runs`` fixture lives in tests/conftest.py (shared with
tests/e2e/faults, so each configuration runs once per session)."""

from __future__ import annotations

import pytest

verl_cpu_harness = pytest.importorskip("verl_cpu_harness")
