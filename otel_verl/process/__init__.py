"""The pipeline of one verl process: what happens when it starts, in order; each step has its module here.

A verl job runs many Python processes (the launcher, the Ray TaskRunner, worker ranks, agent-loop
and reward workers, and Ray's own daemons). In each:

0. **Interpreter start.** ``otel_verl.pth`` turns gRPC's fork handlers off before gRPC is imported,
   in a verl job's processes that run OpenTelemetry's bootstrap (``grpc_fork``); the others inherit
   it. Programs that are not verl are left as they are; the workers' ``sitecustomize`` then runs
   the one it shadows (``worker_bootstrap``).
1. **Activation.** ``opentelemetry-instrument`` calls ``VerlInstrumentor`` in the launcher; in every
   other process ``import verl`` loads the ``verl.plugins`` entry point (``otel_verl._verl_plugin``),
   which instruments only when the job's run id (``OTEL_VERL_RUN_ID``) is set and no kill switch
   says otherwise (``otel_verl.config.disabled_reason``).
2. **Hooks registered, nothing built.** ``VerlInstrumentor._instrument`` gives the job a run id
   (``config.ensure_run_id``), keeps providers passed to it (``state.PROCESS.use_providers``) and
   waits for ``import verl``: only then, before verl's first module runs, it loads and registers
   every hook (``otel_verl.hooks.all_hooks``), each applied when its verl module is imported.
   Processes that never import verl (idle Ray workers) stop before that, having imported a few
   small modules; the SDK is imported only when step 4 builds a pipeline. Ray's own daemons
   started by the launcher do not even run ``opentelemetry-instrument``'s bootstrap
   (``otel_verl.hooks.ray_launch``).
3. **Identity.** The first hook that runs says who this process is (``state.PROCESS.identify``):
   the trainer hooks in the TaskRunner (role, project, experiment), a worker span in a rank (role,
   rank), a rollout hook in an agent-loop worker.
4. **Pipeline, once and atomically.** The first telemetry use builds it (``telemetry.build_own``):
   the resource (``resource``), exporters from the ``OTEL_*`` environment with headers from a file
   kept off Ray (``exporters``, ``otlp_headers``; the OTLP ones behind the on-disk spool,
   ``otel_verl.spool``), tracer, meter and logger providers, the span processor that holds
   undecided span trees back (``span_trees``), the step-boundary metric reader with the series
   identity on every point (``step_reader``, ``point_identity``), then the logging handler
   (``logs``) and the throttle on the exporters' own warnings (``sdk_log_throttle``); the result
   becomes the API's global providers for user code (``global_providers``). If any part fails,
   what started is shut down, the process keeps a no-op pipeline and says so once: no rebuild
   (and no new thread) per hook call.
5. **Instruments.** Created once per process on its meter (``otel_verl.instruments``); worker
   processes add their ``process.*`` and ``hw.gpu.*`` gauges (``worker_metrics``); every pipeline
   carries otel-verl's own CPU, ``otel_verl.overhead.cpu_time`` (``overhead``), and what its bounded
   queues had to drop, ``otel_verl.telemetry.dropped`` (``otel_verl.instruments.drops``).
6. **Every step.** Logged values are recorded and exported in order by one background thread
   (``Telemetry.submit``, ``background.OrderedWorker``); spans are flushed without waiting.
   Processes with no step boundary of their own (worker ranks, reward workers, rollout servers)
   export when their calls pause (``idle_export``).
7. **The end.** At the end of ``fit`` and at exit, a flush and shutdown bounded together by
   ``OTEL_VERL_SHUTDOWN_TIMEOUT``.
"""
