"""verl's ``rl_insight`` logger beside otel-verl: the OTLP settings both read.

RL-Insight (``trainer.logger=[..., rl_insight]``, the ``rl-insight`` package) sends verl's logged
values and stage lanes to a Ray actor of its own, its monitor hub, which exports them as spans with
a tracer provider it builds itself. That provider is never the global one, so its spans and
otel-verl's never meet (docs/coexistence.md). Its OTLP exporter has RL-Insight's endpoint, but it
reads the SDK's standard variables as any exporter does: ``OTEL_EXPORTER_OTLP_HEADERS`` (or
``OTEL_EXPORTER_OTLP_TRACES_HEADERS``) goes with each of its requests, to the RL-Insight server.
Headers meant for the user's own backend are usually a credential: the launcher says so once, naming
the variables (never their values) and the way out, ``OTEL_VERL_OTLP_HEADERS_FILE``, which only
otel-verl reads (``otel_verl.process.otlp_headers``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from otel_verl import config
from otel_verl._safe import safe, warn_once

ENABLE_ENV = "VERL_RL_INSIGHT_ENABLE"  # verl's main_ppo sets it to "1" before ray.init when the logger is on
SERVER_ENV = "RL_INSIGHT_SERVER_URL"  # where RL-Insight's hub finds its server (and the server's OTLP port)
HEADER_VARS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")


@safe("rl_insight headers check")
def warn_shared_headers(environ: Mapping[str, str] | None = None) -> None:
    """One warning when verl's ``rl_insight`` logger is on and OTLP header variables are set."""
    env = os.environ if environ is None else environ
    if env.get(ENABLE_ENV) != "1":
        return
    named = [name for name in HEADER_VARS if env.get(name, "").strip()]
    if named:
        warn_once(
            "rl_insight shared headers",
            "verl's rl_insight logger is on and %s is set: RL-Insight's monitor hub exports its spans with "
            "the OpenTelemetry SDK's OTLP exporter, which sends these headers to the RL-Insight server too "
            "(the host of %s). If they hold a credential for your own backend, give otel-verl its headers "
            "in %s instead, which only otel-verl reads",
            " and ".join(named),
            SERVER_ENV,
            config.OTLP_HEADERS_FILE,
        )
