#!/usr/bin/env bash
# The test command (README, .ci/run): installs what a fresh machine is missing, then runs every
# test against a real Apache Kafka broker and the emulator.
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    skip clippy/fmt and the Python client proof
#
# Caches live outside the clone: cargo's target dir, the Kafka jars and pip's cache under
# ~/.cache/kbq; the virtualenv under .venv (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
# --quick builds no virtualenv: the tests whose oracle is Python say they skip (otherwise a missing
# oracle fails them, tests/support/python.rs).
if ((quick == 1)); then export KBQ_SKIP_PYTHON=1; fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}"
export CARGO_TERM_COLOR=never
log() { printf '\n==> %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "checking the toolchain"
missing=()
command -v cargo >/dev/null || { echo "cargo is required (rustup)"; exit 1; }
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
command -v pkg-config >/dev/null || missing+=(pkg-config)
[[ -e /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
command -v make >/dev/null || missing+=(make)
command -v cc >/dev/null || missing+=(gcc)
# The manifest test's tools (scripts/tools.sh): kustomize is built with go, the PodMonitor
# validator runs on node.
command -v go >/dev/null || missing+=(golang-go)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# The Debezium pipeline's source database (tests/e2e/debezium_pipeline.rs, scripts/debezium.sh):
# Debian's server package; the test runs its own cluster, never the package's service.
scripts/debezium.sh installed || missing+=(postgresql)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  if [[ $(id -u) == 0 ]]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}"
  else sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}"; fi
fi
# Prometheus and promtool (tests/e2e/prometheus.rs), without the package's recommendations (a node
# exporter).
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "installing: prometheus"
  if [[ $(id -u) == 0 ]]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus
fi

log "fetching Apache Kafka jars"
scripts/kafka.sh fetch
log "fetching Kafka Connect and Debezium jars"
scripts/debezium.sh fetch

if ((quick == 0)); then
  log "preparing the Python virtualenv"
  scripts/venv.sh
  scripts/tools.sh
fi

log "building"
cargo build --workspace --all-targets --locked

if ((quick == 0)); then
  log "cargo fmt --check"
  cargo fmt --all -- --check
  log "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi

log "starting one Kafka broker for the whole run"
kafka_dir=$(mktemp -d "${TMPDIR:-/tmp}/kbq-kafka.XXXXXX")
cleanup() {
  "$root/scripts/kafka.sh" stop "$kafka_dir" >/dev/null 2>&1 || true
  rm -rf "$kafka_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scripts/kafka.sh start "$kafka_dir"
export KBQ_KAFKA_BOOTSTRAP
KBQ_KAFKA_BOOTSTRAP=$(cat "$kafka_dir/bootstrap")
export KBQ_KAFKA_DIR="$kafka_dir"

log "cargo test"
# Test binaries run one after the other, each using the cores for its tests. No libtest flags
# here: the criterion benches (run once each as a smoke test) do not accept them.
cargo test --workspace --all-targets --locked

if ((quick == 0)); then
  log "Google's Python clients against the emulator"
  export KBQ_BIN="$CARGO_TARGET_DIR/debug/kafka-bigquery-sink"
  .venv/bin/python -m pytest -q tests/python
fi

for extra in scripts/test.d/*.sh; do
  [[ -e "$extra" ]] || continue
  log "$extra"
  bash "$extra"
done

log "all tests passed"
