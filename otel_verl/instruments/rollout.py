"""Rollout metrics of the agent-loop workers: they count every trajectory and LLM call, kept or not
(their histogram values recorded off the event loop: ``deferred``); an LLM call also feeds the GenAI
conventions' client metrics."""

from __future__ import annotations

from opentelemetry.metrics import Meter

from otel_verl.instruments import catalog
from otel_verl.instruments.deferred import Deferred


class RolloutMetrics:
    def __init__(self, meter: Meter) -> None:
        self.trajectory = catalog.create(meter, catalog.ROLLOUT_TRAJECTORY_DURATION)
        self.llm_call = catalog.create(meter, catalog.ROLLOUT_LLM_CALL_DURATION)
        # the GenAI conventions' client metrics of the same calls (hooks/rollout/llm.py)
        self.gen_ai_duration = catalog.create(meter, catalog.GEN_AI_CLIENT_OPERATION_DURATION)
        self.gen_ai_tokens = catalog.create(meter, catalog.GEN_AI_CLIENT_TOKEN_USAGE)
        self.response_tokens = catalog.create(meter, catalog.ROLLOUT_RESPONSE_TOKENS)
        self.tail_ratio = catalog.create(meter, catalog.ROLLOUT_TAIL_RATIO)
        self.degenerate_ratio = catalog.create(meter, catalog.ROLLOUT_DEGENERATE_RATIO)
        # the histograms' values, queued on the event loop and recorded at collection
        self.deferred = Deferred(meter)
