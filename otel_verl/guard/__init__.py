"""The guard: rules over verl's per-step values (``rules``, defaults in ``rules.yaml``).

Evaluated and acted on in the TaskRunner by ``otel_verl.hooks.guard``; docs/guard.md.
"""
