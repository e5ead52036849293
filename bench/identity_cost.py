"""What the series identity on every metric point costs (``otel_verl.process.point_identity``).

    .venv/bin/python bench/identity_cost.py RUN_TELEMETRY_DIR

A real run's metric files (``metrics-*.jsonl``, as its processes exported them) in two variants:
without the identity on the points (as before) and with it (as now; the variant the files lack is
made from them by the same rule: each resource's ``semconv.RES_SERIES_IDENTITY`` attributes copied
onto its points, a point's own kept). For each, printed side by side:

* the OTLP requests' bytes: protobuf (what OTLP/gRPC and OTLP/HTTP send), gzip-compressed
  protobuf (``OTEL_EXPORTER_OTLP_COMPRESSION=gzip``), and OTLP JSON (the files);
* what the Go-built Prometheus 3 (``scripts/backends.sh``) stores after taking them over OTLP, with
  its default settings and with the kit's ``otlp:`` block: series, label pairs of the head
  (``/api/v1/status/tsdb``), and the bytes of a snapshot of the head (``index`` and ``chunks``).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from verl_cpu_harness.ports import free_ports

from otel_verl import stack
from otel_verl.semconv import RES_SERIES_IDENTITY

REPO = Path(__file__).resolve().parents[1]


def variants(folder: Path) -> dict[str, dict[str, list[dict]]]:
    """{"without": {file: [request...]}, "with": {...}}."""
    out: dict[str, dict[str, list[dict]]] = {"without": {}, "with": {}}
    for path in sorted(folder.glob("metrics-*.jsonl")):
        requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out["without"][path.name] = [_points(copy.deepcopy(r), add=False) for r in requests]
        out["with"][path.name] = [_points(copy.deepcopy(r), add=True) for r in requests]
    return out


def _points(request: dict, add: bool) -> dict:
    for rm in request["resourceMetrics"]:
        identity = {
            a["key"]: a for a in rm.get("resource", {}).get("attributes", []) if a["key"] in RES_SERIES_IDENTITY
        }
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram"):
                    for p in m.get(kind, {}).get("dataPoints", []):
                        own = [a for a in p.get("attributes", []) if identity.get(a["key"]) != a]  # copies out
                        keys = {a["key"] for a in own}
                        p["attributes"] = ([a for k, a in identity.items() if k not in keys] if add else []) + own
    return request


def otlp_bytes(requests: dict[str, list[dict]]) -> tuple[int, int, int, int]:
    """(data points, protobuf bytes, gzip protobuf bytes, JSON bytes) of every request."""
    points = pb = gz = js = 0
    for reqs in requests.values():
        for r in reqs:
            message = json_format.ParseDict(r, ExportMetricsServiceRequest())
            raw = message.SerializeToString()
            pb += len(raw)
            gz += len(gzip.compress(raw))
            js += len(json.dumps(r, separators=(",", ":")))
            points += sum(
                len(getattr(m, m.WhichOneof("data")).data_points)
                for rm in message.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
    return points, pb, gz, js


def prometheus(binary: str, root: Path, config: str, requests: dict[str, list[dict]]) -> dict[str, int]:
    root.mkdir(parents=True)
    (root / "prometheus.yml").write_text(config)
    port = free_ports(["p"])["p"]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(  # noqa: S603
        [
            binary,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-otlp-receiver",
            "--web.enable-admin-api",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2)  # noqa: S310
                break
            except OSError:
                time.sleep(0.1)
        for reqs in requests.values():
            for r in reqs:
                body = json.dumps(r).encode()
                req = urllib.request.Request(
                    f"{url}/api/v1/otlp/v1/metrics", body, {"Content-Type": "application/json"}, method="POST"
                )
                urllib.request.urlopen(req, timeout=30).read()  # noqa: S310
        status = json.load(urllib.request.urlopen(f"{url}/api/v1/status/tsdb", timeout=30))["data"]["headStats"]  # noqa: S310
        snap = urllib.request.Request(f"{url}/api/v1/admin/tsdb/snapshot", b"", method="POST")
        name = json.load(urllib.request.urlopen(snap, timeout=60))["data"]["name"]  # noqa: S310
        folder = root / "tsdb" / "snapshots" / name
        index = sum(p.stat().st_size for p in folder.glob("*/index"))
        chunks = sum(p.stat().st_size for p in folder.glob("*/chunks/*"))
        return {"series": status["numSeries"], "label pairs": status["numLabelPairs"], "index": index, "chunks": chunks}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a run's telemetry folder (metrics-*.jsonl)")
    args = parser.parse_args()
    both = variants(args.folder)
    if not both["without"]:
        raise SystemExit(f"{args.folder}: no metrics-*.jsonl")
    print(f"run: {args.folder} ({len(both['without'])} metric files)")
    print(f"{'OTLP':<10} {'points':>8} {'protobuf B':>12} {'gzip B':>10} {'JSON B':>12}")
    sizes = {}
    for name, reqs in both.items():
        sizes[name] = otlp_bytes(reqs)
        print(f"{name:<10} {sizes[name][0]:>8} {sizes[name][1]:>12} {sizes[name][2]:>10} {sizes[name][3]:>12}")
    per_point = [(sizes["with"][i] - sizes["without"][i]) / sizes["with"][0] for i in (1, 2, 3)]
    print(f"{'+/point':<10} {'':>8} {per_point[0]:>12.1f} {per_point[1]:>10.1f} {per_point[2]:>12.1f}")
    binary = stack.binaries.find_binaries(None, ("prometheus",))["prometheus"]
    kit = yaml.safe_load((REPO / "collector" / "prometheus" / "prometheus.yml").read_text())
    configs = {"default": "# defaults\n", "kit": yaml.safe_dump({"otlp": kit["otlp"], "storage": kit["storage"]})}
    tmp = Path(tempfile.mkdtemp(prefix="identity-cost-"))
    try:
        print(f"\n{'Prometheus 3':<22} {'series':>7} {'label pairs':>12} {'index B':>9} {'chunks B':>9}")
        for cname, config in configs.items():
            for vname, reqs in both.items():
                got = prometheus(binary, tmp / f"{cname}-{vname}", config, reqs)
                label = f"{cname}, {vname}"
                print(f"{label:<22} {got['series']:>7} {got['label pairs']:>12} {got['index']:>9} {got['chunks']:>9}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
