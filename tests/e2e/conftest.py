"""Real verl runs on CPU: the ``verl_runs`` fixture lives in tests/conftest.py (shared with
tests/e2e/faults, so each configuration runs once per session)."""

from __future__ import annotations

from components import require_harness

verl_cpu_harness = require_harness()
