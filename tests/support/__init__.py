"""What tests share beyond fixtures, imported as ``support.<module>`` (``pythonpath = ["tests"]`` in
pyproject.toml: pytest imports the test files themselves by path, ``--import-mode=importlib``).
What ``bench/`` needs too lives in the installed ``verl_cpu_harness`` instead (``otlp_receiver``,
``agent_loop``, ``stack_load``, ``soak``, ``ports``, ``instrumented``), since nothing outside
``tests/`` can import this package.

- ``components``: what a test needs from the machine, and ``require``: a skip on a workstation, a
  failure under CI.
- ``shared_runs``: the real verl runs several test modules read (made once per session).
- ``clock``: ``FakeClock``, a settable monotonic clock.
- ``compat``: the compatibility matrix: which verl release, driver and rollout engine CI runs with.
- ``points``: reading a real run's metric points the way several e2e tests do.
- ``otlp_json``: small OTLP JSON-lines files built by hand (the offline tools' tests).
- ``otlp_reference``: the readers' former ``json_format`` check, the oracle of the fast reader.
- ``otlp_grpc_receiver``: an in-process OTLP/gRPC receiver.
- ``hostile_http``: an HTTP endpoint on raw sockets that answers what a script says.
- ``opskit``: the ops kit's tests: the kit's files, tools, the live stack, polling, the excuse rule.
- ``promreplay``: a real run's metrics replayed through the shipped alert rules with promtool.
- ``netns_hosts``: hosts of a multi-node test on one machine (network namespaces).
"""
