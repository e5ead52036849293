"""``otel-verl stack up|down|status|configs|build``: the ops kit's stack without Docker, on one host or several.

Three roles (``--role``):

* ``all-in-one`` (the default): the OpenTelemetry Collector, Prometheus 3, Alertmanager, Jaeger v2
  (traces) and VictoriaLogs (logs) as local processes bound to 127.0.0.1, with the configs of the
  ops kit (the ones compose mounts), every data folder under one ``--data-dir``;
* ``agent``: the Collector of one node of a multi-node job alone (``otelcol-agent.yaml``): the
  node's training processes send to it on localhost, it forwards to the gateways of
  ``--gateway`` (a static list, or ``dns:NAME:PORT`` for every address of a name) with the
  load_balancing exporter, over TLS with a bearer token (``--token-file``, ``--gateway-ca``);
* ``gateway``: a Collector of the gateway tier alone (``otelcol-config.yaml``: the all-in-one
  routing), taking OTLP from the agents on ``--bind`` over TLS with the bearer token
  (``otelcol-remote.yaml``) and exporting to the backends of an all-in-one stack on this host (its
  ``--port`` numbers), or to the ``OTELCOL_{METRICS,TRACES,LOGS}_ENDPOINT`` of the environment.

``--bind`` other than loopback needs ``--tls-cert``, ``--tls-key`` and ``--token-file``: a
Collector that other nodes reach takes OTLP only over TLS with the token. Health check and
self-metrics stay on 127.0.0.1. An IPv6 address (``--bind fd00::5``, ``::1``) is taken with TLS
only: the OTLP receivers alone listen there (``[fd00::5]:4317`` in the Collector's config); without
TLS every Collector port shares ``--bind``, and the self-metrics reader and Prometheus's scrape of it
take an IPv4 address or a name, so ``--bind`` is then refused unless it is IPv4 or a host name.
``--collector-config FILE`` adds config files merged after the role's (``otelcol-debug.yaml``: a line per span).

The kit is ``collector/`` and ``scripts/backends.sh`` of a clone; the wheel carries the same files
as ``otel_verl/_ops_kit/`` (``pyproject.toml``'s force-include), so an installed otel-verl needs no
clone: ``configs DIR`` writes the configs out for a Collector/Prometheus/Grafana of the user's own,
``build`` runs the script that builds the five binaries from their Go modules. The Collector config
takes its addresses from the environment (``${env:OTELCOL_...:-compose default}``); Prometheus and
Alertmanager have no such substitution, so ``up`` writes a copy of theirs with the local addresses
into the data folder. Binaries come from ``--bin-dir``, ``PATH``, then the folder
``scripts/backends.sh`` builds into; the official release binaries of each project work as well.

``up`` returns once every component answers its readiness endpoint (asked directly, never through
a proxy of ``$http_proxy``); ``down`` stops what ``up`` started (the pids it recorded, checked
against their command line); ``status`` tells which parts answer. State lives in
``DATA_DIR/stack.json``; one data folder per stack (an agent, a gateway and an all-in-one stack on
one host each need their own, and their own ``--port`` numbers).

The modules, by concern (the command line is ``otel_verl.cli.stack``):

* ``ports``: the port names of ``--port``, their defaults, the loopback address;
* ``roles``: the Collector's role and TLS/token/gateway options (``CollectorSetup``), checked
  before anything starts (``check_setup``);
* ``binaries``: where each component's binary is found;
* ``render``: each component's command line, environment and readiness URL, and the configs
  written for it (``plan``);
* ``kit``: where the ops kit's files are, ``configs DIR`` and ``build``;
* ``supervisor``: ``up``, ``down`` and ``status`` (the processes and their state file).
"""

from otel_verl.stack import binaries, kit, ports, render, roles, supervisor

__all__ = ["binaries", "kit", "ports", "render", "roles", "supervisor"]
