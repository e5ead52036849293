#!/usr/bin/env bash
# Build the live stack's backends from their published Go modules (no Docker, no release downloads):
#   otelcol-verl   OpenTelemetry Collector, by the Collector Builder (ocb) from collector/builder-config.yaml
#   prometheus     Prometheus 3 with its web UI (built with npm), wrapper module collector/gomod/prometheus
#   alertmanager   Alertmanager, wrapper module collector/gomod/alertmanager (placeholder UI, see below)
#   jaeger         Jaeger v2, wrapper module collector/gomod/jaeger
#   victoria-logs  VictoriaLogs server, wrapper module collector/gomod/victorialogs
#
#   bash scripts/backends.sh [COMPONENT...]     # default: all five; COMPONENT as in the first column
#
# Binaries go to ${OTEL_VERL_BACKENDS_DIR:-$HOME/.cache/otel-verl/backends}; the Go module and build
# caches to $HOME/.cache/otel-verl/go/{mod,build} unless GOMODCACHE/GOCACHE are set. Idempotent: a
# component is rebuilt only when its binary is missing or its inputs (manifest, go.mod, go.sum,
# version) changed. Prints one line per component. Exits 1 if any component failed (the others are
# still built), naming it and its log.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${OTEL_VERL_BACKENDS_DIR:-$HOME/.cache/otel-verl/backends}
export GOMODCACHE=${GOMODCACHE:-$HOME/.cache/otel-verl/go/mod}
export GOCACHE=${GOCACHE:-$HOME/.cache/otel-verl/go/build}
# npm's cache and pnpm's store, for Prometheus's web UI
NPM_CACHE=${OTEL_VERL_NPM_CACHE:-$HOME/.cache/otel-verl/npm}
# -mod=readonly: the wrapper go.mod/go.sum in the repo are the pins; a build never edits them.
export GOFLAGS="-buildvcs=false -mod=readonly"
export CGO_ENABLED=0 # static binaries, no C toolchain needed
# Never fetch another Go toolchain behind the user's back; every module here accepts Go 1.26.8.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

OCB_VERSION=v0.165.0      # = the core release in collector/builder-config.yaml
PROMETHEUS_VERSION=3.16.0 # module github.com/prometheus/prometheus v0.316.0
PROMETHEUS_MODULE=v0.316.0
PNPM_VERSION=12.25.1      # builds Prometheus's web UI (web/ui/pnpm-lock.yaml); Prometheus's CI takes any pnpm < 13
ALERTMANAGER_VERSION=v0.35.0
JAEGER_VERSION=v1.76.0 # module tag of Jaeger v2.x (the v2 binaries are built from the v1.x-tagged module)
VICTORIALOGS_VERSION=v1.52.1

ALL=(otelcol-verl prometheus alertmanager jaeger victoria-logs)
say() { echo "backends: $*"; }
command -v go >/dev/null 2>&1 || {
  say "go is not on PATH (Go >= 1.26.8 is needed)" >&2
  exit 1
}
mkdir -p "$DIR/logs" "$DIR/work"
# One build per folder at a time: setup.sh's background build, scripts/stack.sh up and the tests
# (tests/ops/opskit.py wait_for_backend_build) take this lock; a second caller waits here, then
# finds the binaries built.
exec 9>"$DIR/.lock"
flock 9

# Build inputs of a component, hashed: the binary is rebuilt only when they change.
stamp_of() {
  local name=$1
  {
    echo "$name $(go env GOVERSION)"
    case $name in
      otelcol-verl) echo "$OCB_VERSION" && cat "$ROOT/collector/builder-config.yaml" ;;
      *) cat "$ROOT/collector/gomod/$(gomod_dir "$name")/go.mod" "$ROOT/collector/gomod/$(gomod_dir "$name")/go.sum" ;;
    esac
    case $name in
      prometheus) echo "$PROMETHEUS_VERSION $PROMETHEUS_MODULE $PNPM_VERSION $(node --version 2>/dev/null) $(npm --version 2>/dev/null)" && declare -f prometheus_ui ;;
      alertmanager) echo "$ALERTMANAGER_VERSION" ;;
      jaeger) echo "$JAEGER_VERSION" ;;
      victoria-logs) echo "$VICTORIALOGS_VERSION" ;;
    esac
    declare -f "build_${name//-/_}"
  } | sha256sum | cut -c1-16
}
gomod_dir() { case $1 in victoria-logs) echo victorialogs ;; *) echo "$1" ;; esac; }

# A private copy of a wrapper module, so the repository stays read-only (CI's clone may be).
wrapper() {
  local name=$1 work="$DIR/work/$1"
  rm -rf "$work" && mkdir -p "$work"
  cp "$ROOT/collector/gomod/$(gomod_dir "$name")/go.mod" "$ROOT/collector/gomod/$(gomod_dir "$name")/go.sum" "$work/"
  echo "$work"
}

build_otelcol_verl() {
  local work="$DIR/work/otelcol-verl"
  rm -rf "$work" && mkdir -p "$work"
  GOBIN="$DIR/work/tools" GOFLAGS=-buildvcs=false nice -n 19 go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION"
  # ocb generates a module (main.go, components.go, go.mod) under output_path and runs go mod tidy
  # in it, so it needs GOFLAGS without -mod=readonly.
  (cd "$work" && GOFLAGS=-buildvcs=false nice -n 19 "$DIR/work/tools/builder" --config="$ROOT/collector/builder-config.yaml")
  cp "$work/otelcol-verl/otelcol-verl" "$DIR/otelcol-verl.new"
}

build_prometheus() {
  local work src
  work=$(wrapper prometheus)
  # The wrapper's go.mod replaces the module by a copy in src/, into which the web UI is built.
  src=$(go mod download -json "github.com/prometheus/prometheus@$PROMETHEUS_MODULE" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "prometheus module not found in GOMODCACHE" >&2; return 1; }
  cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
  # remove_all_sd: only static_configs (all the stack uses); drops the cloud/Kubernetes service
  # discovery SDKs, which are most of the build. builtinassets: the web UI, built by prometheus_ui.
  local tags=remove_all_sd
  if prometheus_ui "$work/src"; then tags=remove_all_sd,builtinassets; else echo "prometheus: built WITHOUT the web UI" >&2; fi
  (cd "$work" && nice -n 19 go build -trimpath -tags "$tags" -ldflags "-s -w \
    -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION \
    -X github.com/prometheus/common/version.Branch=otel-verl-backends" \
    -o "$DIR/prometheus.new" github.com/prometheus/prometheus/cmd/prometheus)
}

# Prometheus's web UI (the Mantine one) from the sources in its Go module (web/ui), as its Makefile's
# `assets` and `assets-compress` targets build it: pnpm (from npm, pinned) installs the packages of
# web/ui/pnpm-lock.yaml, the two PromQL modules and the UI are built, scripts/compress_assets.sh
# writes web/ui/embed.go (tag builtinassets) over the gzipped files. Two changes, both because of
# what the npm registry serves here: @mantine/* 9.7.2 of the lock is not there, so the six @mantine
# packages are 9.8.1 (the lock's only other change is their new dependency); and their types make
# `tsc` reject five callbacks (an option "possibly null"), so the UI is bundled by `vite build`
# without that type check (the Makefile's `tsc && vite build`). Needs node and npm; without them,
# or when a step fails, Prometheus is built without the UI (the API is complete either way).
prometheus_ui() {
  local ui=$1/web/ui tools=$DIR/work/npm-tools
  command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || {
    echo "prometheus UI: node and npm are not on PATH" >&2
    return 1
  }
  # Each step ends the subshell when it fails: set -e does not act in a function called as a condition.
  (
    export npm_config_cache=$NPM_CACHE CI=true
    nice -n 19 npm install --prefix "$tools" --no-audit --no-fund --no-save -E "pnpm@$PNPM_VERSION" || exit 1
    export PATH=$tools/node_modules/.bin:$PATH
    cd "$ui" || exit 1
    cat >>pnpm-workspace.yaml <<'YAML' || exit 1
overrides:
  '@mantine/code-highlight': 9.8.1
  '@mantine/core': 9.8.1
  '@mantine/dates': 9.8.1
  '@mantine/hooks': 9.8.1
  '@mantine/notifications': 9.8.1
  '@mantine/store': 9.8.1
YAML
    # the lock's entry is replaced by the override: the release-age check cannot look it up
    sed -i "s/^minimumReleaseAgeExclude:$/&\n  - '@mantine\/code-highlight@9.7.2'/" pnpm-workspace.yaml || exit 1
    nice -n 19 pnpm install --no-frozen-lockfile --store-dir "$NPM_CACHE/pnpm-store" || exit 1
    CI= nice -n 19 bash build_ui.sh --build-module || exit 1
    (cd mantine-ui && CI= nice -n 19 pnpm exec vite build) || exit 1
    rm -rf static && mkdir static && mv mantine-ui/dist static/mantine-ui || exit 1
    cd "$1" && nice -n 19 bash scripts/compress_assets.sh || exit 1
    [ -s web/ui/static/mantine-ui/index.html.gz ] && grep -q '^//go:embed' web/ui/embed.go
  )
}

build_alertmanager() {
  local work src
  work=$(wrapper alertmanager)
  # The server embeds ui/app/dist (the built Elm and Mantine UIs), which is generated by npm and is
  # not in the published module, so a plain build fails ("pattern app/dist: no matching files").
  # The wrapper's go.mod replaces the module by this copy, with a one-page placeholder in each UI;
  # the API (/api/v2, /-/ready), routing and webhooks are untouched.
  src=$(go mod download -json "github.com/prometheus/alertmanager@$ALERTMANAGER_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "alertmanager module not found in GOMODCACHE" >&2; return 1; }
  cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
  local page='<!doctype html><title>Alertmanager</title><p>UI not built (otel-verl backends.sh builds from the Go module). API: <a href="/api/v2/status">/api/v2/status</a>.'
  for ui in elm mantine; do # the server sends HTML only from its .gz (ui/web.go)
    mkdir -p "$work/src/ui/app/dist/$ui" && echo "$page" | gzip -9n >"$work/src/ui/app/dist/$ui/index.html.gz"
  done
  (cd "$work" && nice -n 19 go build -trimpath -ldflags "-s -w \
    -X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v} \
    -X github.com/prometheus/common/version.Branch=otel-verl-backends" \
    -o "$DIR/alertmanager.new" github.com/prometheus/alertmanager/cmd/alertmanager)
}

build_jaeger() {
  local work
  work=$(wrapper jaeger)
  # The wrapper repeats Jaeger's own replace directive (Shopify/sarama). Without the `ui` assets
  # the query service serves Jaeger's placeholder page; its HTTP API (/api/traces) is complete.
  (cd "$work" && nice -n 19 go build -trimpath -ldflags "-s -w" -o "$DIR/jaeger.new" github.com/jaegertracing/jaeger/cmd/jaeger)
}

build_victoria_logs() {
  local work
  work=$(wrapper victoria-logs)
  (cd "$work" && nice -n 19 go build -trimpath -ldflags "-s -w \
    -X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=victoria-logs-$VICTORIALOGS_VERSION" \
    -o "$DIR/victoria-logs.new" github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs)
}

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${ALL[@]}")
failed=()
for name in "${wanted[@]}"; do
  if ! printf '%s\n' "${ALL[@]}" | grep -qx -- "$name"; then
    say "unknown component '$name' (known: ${ALL[*]})" >&2
    exit 2
  fi
  stamp=$(stamp_of "$name")
  if [ -x "$DIR/$name" ] && [ "$(cat "$DIR/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    say "$name present ($DIR/$name)"
    continue
  fi
  start=$SECONDS
  log="$DIR/logs/$name.log"
  if ("build_${name//-/_}") >"$log" 2>&1; then
    mv -f "$DIR/$name.new" "$DIR/$name"
    echo "$stamp" >"$DIR/.$name.stamp"
    rm -rf "$DIR/work/$name" # generated sources and module copies; the caches keep what a rebuild needs
    say "$name built in $((SECONDS - start)) s ($DIR/$name, $(du -m "$DIR/$name" | cut -f1) MB)"
  else
    rm -f "$DIR/$name.new"
    failed+=("$name")
    say "$name FAILED after $((SECONDS - start)) s; last lines of $log:" >&2
    tail -n 15 "$log" | sed 's/^/    /' >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]}" >&2
  exit 1
fi
