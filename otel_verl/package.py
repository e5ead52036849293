"""The verl versions this instrumentation supports (checked by ``opentelemetry-instrument``)."""

# Only what the tests run (scripts/setup.sh installs verl 0.9.1): verl 0.9.0 lacks cachetools in its
# verl-core extra and its CPU GRPO run fails in the TaskRunner (no flash_attn). Keep in step with
# pyproject.toml's `instruments` extra and README (tests/unit/test_package.py).
_instruments = ("verl >= 0.9.1, < 0.10",)

_supports_metrics = True
