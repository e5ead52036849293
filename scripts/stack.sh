#!/usr/bin/env bash
# The live stack without Docker, for the tests, CI and a workstation:
#   bash scripts/stack.sh up [OPTIONS]     # builds what is missing (scripts/backends.sh), then starts it
#   bash scripts/stack.sh status|down [OPTIONS]
# OPTIONS go to `otel-verl stack` (--data-dir, --port NAME=PORT, --timeout); the binaries are the ones
# backends.sh builds into ${OTEL_VERL_BACKENDS_DIR:-$HOME/.cache/otel-verl/backends}.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${OTEL_VERL_BACKENDS_DIR:-$HOME/.cache/otel-verl/backends}
action=${1:-}
case $action in
  up) bash "$ROOT/scripts/backends.sh" ;;
  down | status) ;;
  *)
    echo "usage: bash scripts/stack.sh up|down|status [otel-verl stack options]" >&2
    exit 2
    ;;
esac
shift
if [ -x "$ROOT/.venv/bin/otel-verl" ]; then
  cli=("$ROOT/.venv/bin/otel-verl")
elif command -v otel-verl >/dev/null 2>&1; then
  cli=(otel-verl)
else
  echo "stack: otel-verl is not installed (bash scripts/setup.sh creates .venv with it)" >&2
  exit 1
fi
exec "${cli[@]}" stack "$action" --bin-dir "$BIN_DIR" --config-dir "$ROOT/collector" "$@"
