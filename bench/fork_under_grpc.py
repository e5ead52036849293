"""How many children started as Ray starts its daemons die before ``exec`` while the parent's
OTLP/gRPC exporter has a call in flight, for each ``GRPC_ENABLE_FORK_SUPPORT`` setting.

Each case is a fresh interpreter: an OTLP/gRPC metric exporter sends every 200 ms (2 s timeout) to
an endpoint that accepts and never answers, and the main thread starts ``/bin/sh -c "exit 7"``
``--forks`` times with ``subprocess.Popen(..., preexec_fn=...)`` (a plain fork, then exec, as Ray's
``start_ray_process`` does). A child that does not exit 7 died before exec. The ``true`` case can
hang in a child before exec: it is cut after ``--case-timeout`` seconds.

    .venv/bin/python bench/fork_under_grpc.py [--forks 1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r"""
import os, socket, subprocess, sys, threading
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(128)
held = []
threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
if sys.argv[2] == "after-import":
    import grpc  # noqa: F401
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
exporter = OTLPMetricExporter(endpoint=f"http://127.0.0.1:{server.getsockname()[1]}", insecure=True, timeout=2)
provider = MeterProvider([PeriodicExportingMetricReader(exporter, export_interval_millis=200)])
provider.get_meter("bench").create_counter("c").add(1)
codes = [subprocess.Popen(["/bin/sh", "-c", "exit 7"], preexec_fn=lambda: None).wait() for _ in range(int(sys.argv[1]))]
died = [c for c in codes if c != 7]
print(len(died), sorted(set(died)), flush=True)
os._exit(0)
"""

CASES = {
    "unset (gRPC's default)": ({}, "before"),
    "false": ({"GRPC_ENABLE_FORK_SUPPORT": "false"}, "before"),
    "false, set after import grpc": ({}, "after-import"),
    "true": ({"GRPC_ENABLE_FORK_SUPPORT": "true"}, "before"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forks", type=int, default=1000)
    parser.add_argument("--case-timeout", type=float, default=300)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GRPC_")) and k != "PYTHONPATH"}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.forks} Ray-style children per case")
    print("| GRPC_ENABLE_FORK_SUPPORT | children that died before exec | their exit codes |")
    print("|---|---|---|")
    for name, (env, when) in CASES.items():
        try:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.forks), when],
                env={**base, **env},
                capture_output=True,
                text=True,
                timeout=args.case_timeout,
            )
            died, codes = out.stdout.strip().splitlines()[-1].split(" ", 1)
            print(f"| {name} | {died} / {args.forks} | {codes} |", flush=True)
        except subprocess.TimeoutExpired:
            print(f"| {name} | hung: no answer in {args.case_timeout:.0f} s (a child stuck) | |", flush=True)
        except (IndexError, ValueError):
            print(f"| {name} | the case failed: {out.stderr.strip().splitlines()[-1:]} | |", flush=True)


if __name__ == "__main__":
    main()
