"""Fixtures of the rollout tests (``otel_verl.hooks.rollout``): no process gauges (the rollout state
is fresh for each test with the rest of the process's, ``_fresh_process``)."""

from __future__ import annotations

import pytest

from otel_verl.config import settings


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setenv("OTEL_VERL_PROCESS_METRICS", "false")  # covered in tests/unit/instruments/test_gpu.py
    settings.cache_clear()
    yield
    monkeypatch.delenv("OTEL_VERL_PROCESS_METRICS")
    settings.cache_clear()
