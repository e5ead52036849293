"""Per-step cost on the training thread: the "POST the step's metrics" approach vs otel-verl.

The seed articles' monitoring hook does a synchronous ``requests.post(url, json=metrics,
timeout=2)`` at every step. This measures, per step (100 numeric keys), the time the
training thread spends in:

* that POST to a local HTTP server that is healthy / slow (answers after 1.5 s) / down
  (connection refused: fails at once on one host) / hung (accepts, never answers: the full
  timeout, as a remote host that drops packets would also cost);
* verl's own ``Tracking.log`` with its ``file`` and ``tensorboard`` backends;
* otel-verl's path: what instrumenting ``Tracking.log`` adds (record 100 gauges,
  ``StepMetricReader.mark_step``, flush request), exporting OTLP/gRPC to a refused
  endpoint and to a hung one (accepts, never answers). Export happens in a background
  thread, so the endpoint's state does not reach the training thread.

Usage: ``python bench/requests_post.py [--steps 20] [--slow-steps 4]``
"""

from __future__ import annotations

import argparse
import http.server
import json
import logging
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

import requests
from _util import machine, table

SLOW_S = 1.5
TIMEOUT_S = 2.0


class _Handler(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.delay)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


def _server(delay: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("H", (_Handler,), {"delay": delay})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hung_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    conns: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conns.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return sock, sock.getsockname()[1]


def _per_step_ms(fn, steps: int) -> tuple[float, float]:
    samples = []
    for step in range(steps):
        start = time.perf_counter()
        fn(step)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), max(samples)


def _post_case(url: str):
    session = requests.Session()

    def step(n: int, payload: dict) -> None:
        try:
            session.post(url, json={"step": n, **payload}, timeout=TIMEOUT_S)
        except requests.RequestException:
            pass  # what the articles' hook does: log and carry on

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--slow-steps", type=int, default=4)
    ns = parser.parse_args(argv)
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    logging.getLogger("otel_verl").setLevel(logging.ERROR)
    payload = {f"actor/key_{i:03d}": float(i) * 0.5 for i in range(97)}
    payload.update({"actor/kl_loss": 0.01, "critic/score/mean": 0.5, "perf/throughput": 1234.0})
    rows = []

    healthy, healthy_url = _server(0.0)
    slow, slow_url = _server(SLOW_S)
    down_url = f"http://127.0.0.1:{_closed_port()}/metrics"
    hung_post, hung_post_port = _hung_port()
    for label, url, steps in (
        ("requests.post, server healthy", healthy_url, ns.steps),
        (f"requests.post, server slow ({SLOW_S} s)", slow_url, ns.slow_steps),
        ("requests.post, server down (refused)", down_url, ns.steps),
        ("requests.post, server hung (accepts, never answers)", f"http://127.0.0.1:{hung_post_port}/m", ns.slow_steps),
    ):
        post = _post_case(url)
        med, worst = _per_step_ms(lambda n, post=post: post(n, payload), steps)
        rows.append([label, f"{med:.2f}", f"{worst:.2f}", steps])
    healthy.shutdown()
    slow.shutdown()
    hung_post.close()

    from verl.utils.tracking import Tracking

    tmp = tempfile.mkdtemp(prefix="bench-verl-")
    os.environ["VERL_FILE_LOGGER_ROOT"] = tmp
    os.environ["TENSORBOARD_DIR"] = os.path.join(tmp, "tb")
    trackers = {}
    for backend in ("file", "tensorboard"):
        trackers[backend] = Tracking(project_name="bench", experiment_name="post", default_backend=[backend])
        tracker = trackers[backend]
        med, worst = _per_step_ms(lambda n, t=tracker: t.log(data=payload, step=n), ns.steps)
        rows.append(
            [f"verl Tracking.log, backend '{backend}' (not instrumented)", f"{med:.2f}", f"{worst:.2f}", ns.steps]
        )

    # otel-verl: the same Tracking.log with no backend, instrumented, real per-process pipeline.
    from otel_verl import VerlInstrumentor, config
    from otel_verl.process.state import PROCESS

    plain = Tracking(project_name="bench", experiment_name="post", default_backend=[])
    base, _ = _per_step_ms(lambda n: plain.log(data=payload, step=n), ns.steps)
    hung_sock, hung_port = _hung_port()
    for label, port in (("refused", _closed_port()), ("hung", hung_port)):
        os.environ.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_METRIC_EXPORT_INTERVAL": "600000",
                "OTEL_VERL_RUN_ID": "bench",
                "OTEL_VERL_FILE_DIR": tmp,
            }
        )
        config.settings.cache_clear()
        PROCESS._given, PROCESS._telemetry, PROCESS._metrics = None, None, None  # noqa: SLF001
        instrumentor = VerlInstrumentor()
        instrumentor.instrument(skip_dep_check=True)
        plain.log(data=payload, step=0)  # first call builds the pipeline and the 100 gauges
        med, worst = _per_step_ms(lambda n: plain.log(data=payload, step=n), ns.steps)
        instrumentor.uninstrument()
        PROCESS.telemetry.shutdown(1.0)
        rows.append(
            [f"otel-verl: added to Tracking.log, OTLP endpoint {label}", f"{med - base:.2f}", f"{worst:.2f}", ns.steps]
        )
    hung_sock.close()

    print(f"# bench/requests_post.py  ({machine()}; 100 keys per step, POST timeout {TIMEOUT_S} s)")
    print(table(["per step, on the training thread", "median ms", "worst ms", "steps"], rows))
    print(json.dumps({"verl Tracking.log with no backend, median ms": round(base, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
