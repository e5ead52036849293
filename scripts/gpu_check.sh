#!/usr/bin/env bash
# Check otel-verl's GPU metrics against nvidia-smi on a GPU machine (bench/gpu_check.py).
# The GPU image is expected to have torch (CUDA) and nvidia-ml-py but perhaps no OpenTelemetry
# and no network: `prepare` (on a machine with PyPI) puts the few pure-Python packages otel-verl's
# GPU code needs into .work/gpu-site; `run` (on the GPU machine, same checkout) uses them.
#   bash scripts/gpu_check.sh prepare && bash scripts/gpu_check.sh run
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=.work/gpu-site
case "${1:-run}" in
  prepare)
    rm -rf "$SITE" && mkdir -p "$SITE"
    python3 -m pip install -q --no-deps --target "$SITE" \
      opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions opentelemetry-instrumentation \
      wrapt typing_extensions importlib_metadata zipp packaging
    # wrapt's C extension is built for this Python; its pure-Python fallback serves any other
    echo "gpu_check: $(du -sh "$SITE" | cut -f1) in $SITE"
    ;;
  run)
    PYTHONPATH="$PWD:$PWD/$SITE${PYTHONPATH:+:$PYTHONPATH}" python3 bench/gpu_check.py "${@:2}"
    ;;
  *) echo "usage: $0 prepare|run [gpu_check.py options]" >&2; exit 2 ;;
esac
