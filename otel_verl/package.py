"""The verl versions this instrumentation supports (checked by ``opentelemetry-instrument``)."""

_instruments = ("verl >= 0.9.0, < 0.10",)

_supports_metrics = True
