"""User code that uses the plain OpenTelemetry API, as a verl user would (test asset).

- ``compute_score``: a custom reward function (``reward.custom_reward_function``) that records a
  span, a histogram and a counter; it runs in verl's reward-loop worker processes;
- ``UserAgentLoop``: a custom agent loop (registered through ``agent_loop_config_path``) that
  records a span around verl's single-turn loop; it runs in the agent-loop worker processes.

With ``HTTP_URL_VAR`` set, the reward function also POSTs each response there with ``requests``
(a reward model behind an API): with the requests instrumentation loaded, that call is a span of
its own. Each reward span says how many SDK export threads its process runs (``ATTR_*_THREADS``):
one span processor's thread per trace exporter and no periodic metric reader when the process has
one pipeline, otel-verl's.

Only the plain API is used, plus otel-verl's one helper for what that API cannot know (the
training step, ``otel_verl.step_attributes``) on the spans. ``overrides()`` gives the Hydra
overrides that plug both into a harness run.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace

try:
    from otel_verl import step_attributes
except ImportError:  # the harness runs without otel-verl too

    def step_attributes() -> dict[str, int]:
        return {}


SPAN_REWARD = "my.reward.check"
SPAN_AGENT = "my.agent.run"
HISTOGRAM = "my.reward.sentiment"
COUNTER = "my.reward.calls"
GAUGE = "my.agent.last_response_chars"
AGENT_NAME = "user_loop"
HTTP_URL_VAR = "VERL_CPU_HARNESS_USER_HTTP_URL"
ATTR_SPAN_THREADS = "my.process.span_export_threads"
ATTR_PERIODIC_THREADS = "my.process.periodic_metric_threads"

tracer = trace.get_tracer("my.reward")
meter = metrics.get_meter("my.reward")
# created at import, before any provider is set: the API's proxies must forward them later
sentiment = meter.create_histogram(HISTOGRAM, unit="1", description="a response-quality score")
calls = meter.create_counter(COUNTER, unit="{call}")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    with tracer.start_as_current_span(SPAN_REWARD) as span:
        value = 1.0 if solution_str.strip().startswith(ground_truth) else 0.0
        span.set_attributes({"my.reward.value": value, **step_attributes(), **_export_threads()})
        url = os.environ.get(HTTP_URL_VAR)
        if url:
            import requests

            requests.post(url, json={"response": solution_str}, timeout=10)
        quality = min(1.0, len(solution_str.strip()) / 16.0)
        sentiment.record(quality, {"data_source": data_source})
        calls.add(1, {"data_source": data_source})
        return value


def _export_threads() -> dict[str, int]:
    names = [t.name for t in threading.enumerate()]
    return {
        ATTR_SPAN_THREADS: sum(n.startswith("OtelBatchSpanRecordProcessor") for n in names),
        ATTR_PERIODIC_THREADS: sum(n.startswith("OtelPeriodicExportingMetricReader") for n in names),
    }


@functools.cache
def _user_agent_loop() -> type:
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    agent_tracer = trace.get_tracer("my.agent")
    last_chars = metrics.get_meter("my.agent").create_gauge(GAUGE, unit="{char}")

    class UserAgentLoop(SingleTurnAgentLoop):
        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            with agent_tracer.start_as_current_span(SPAN_AGENT, attributes=step_attributes()):
                output = await super().run(sampling_params, **kwargs)
            last_chars.set(len(output.response_ids))
            return output

    return UserAgentLoop


def __getattr__(name: str) -> Any:
    # verl imports the class by name in the agent-loop worker; verl itself is imported only then
    if name == "UserAgentLoop":
        return _user_agent_loop()
    raise AttributeError(name)


def overrides(workdir: Path) -> list[str]:
    """Hydra overrides: this module's reward function and agent loop for a harness run."""
    config = Path(workdir) / "user_agent_loop.yaml"
    config.write_text(f"- name: {AGENT_NAME}\n  _target_: {__name__}.UserAgentLoop\n")
    return [
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={config}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
    ]
