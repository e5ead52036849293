#!/usr/bin/env bash
# The main job: a real verl GRPO run (v1 driver, 3 steps, tiny random model) on this CPU,
# under `opentelemetry-instrument`, writing OTLP JSON files; then a summary of what it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

work=.work/demo
rm -rf "$work/telemetry"
# Any OTLP exporter works the same way; files need no server.
export OTEL_TRACES_EXPORTER=otlp_json_file OTEL_METRICS_EXPORTER=otlp_json_file OTEL_LOGS_EXPORTER=none
export OTEL_VERL_FILE_DIR="$PWD/$work/telemetry" OTEL_SERVICE_NAME=verl-cpu-demo
# verl_cpu_harness (tests/harness) makes the model/data and runs, in $work:
#   opentelemetry-instrument python -m verl.trainer.main_ppo <overrides>
.venv/bin/python -m verl_cpu_harness --workdir "$work" --driver "${DRIVER:-v1}" --algo "${ALGO:-grpo}" \
  --steps "${STEPS:-3}" --launcher "$PWD/.venv/bin/opentelemetry-instrument"

echo
echo "== telemetry written to $work/telemetry =="
ls -l "$work/telemetry"
echo
.venv/bin/otel-verl summary "$work/telemetry"
echo
# The same files as one self-contained HTML page (stage breakdown, the slowest step's trace
# with its rollout trajectories, rollout latency, reward/KL/throughput curves).
.venv/bin/otel-verl report "$work/telemetry" -o "$work/report.html"
