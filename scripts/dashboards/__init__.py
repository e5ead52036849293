"""The ops kit's Grafana dashboards as code (grafana-foundation-sdk), from which
``scripts/gen_dashboards.py`` writes ``collector/grafana/dashboards/*.json``.

Not part of otel-verl's package: the SDK is a test/development dependency only (``.[test]``).
"""

from __future__ import annotations

from collections.abc import Callable

from grafana_foundation_sdk.builders.dashboard import Dashboard

from . import verl_rl_training

# file name in collector/grafana/dashboards -> the function that builds it
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {verl_rl_training.FILE: verl_rl_training.build}
