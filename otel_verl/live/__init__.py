"""What operates live things: the environment's endpoints and a backend stack (``otel-verl`` commands).

* ``doctor``: ``otel-verl doctor``, what the instrumentation would do in this environment (it
  resolves the exporters and probes their endpoints);
* ``stack``: ``otel-verl stack``, the Collector and backends run without Docker.
"""
