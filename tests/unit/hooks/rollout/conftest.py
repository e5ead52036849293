"""Fixtures of the rollout tests (``otel_verl.hooks.rollout``): fresh per-process rollout state."""

from __future__ import annotations

import pytest

from otel_verl.config import settings
from otel_verl.hooks.rollout import state as rollout_state


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setenv(
        "OTEL_VERL_PROCESS_METRICS", "false"
    )  # covered in tests/unit/instruments/test_instruments_gpu.py
    settings.cache_clear()
    rollout_state.reset()
    yield
    rollout_state.reset()
    monkeypatch.delenv("OTEL_VERL_PROCESS_METRICS")
    settings.cache_clear()
