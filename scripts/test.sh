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
# Logs of the steps below, one file each, printed whole when a step fails.
logs=$(mktemp -d "${TMPDIR:-/tmp}/kbq-test-logs.XXXXXX")
cargo build --workspace --all-targets --locked
# The test executables, as `cargo test --workspace --all-targets` builds and would run them: this
# build is already done above, and its JSON names every executable. The steps below run them
# directly: a narrower cargo selection (`cargo test --test e2e`) unifies other features and
# rebuilds dependencies.
cargo test --workspace --all-targets --locked --no-run --message-format=json-render-diagnostics \
  >"$logs/build.json"
python3 - "$logs/build.json" >"$logs/tests.tsv" <<'EOF'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        t = m["target"]
        print("\t".join([t["name"], t["kind"][0], m["manifest_path"], m["executable"]]))
EOF
# The two end-to-end binaries are steps of their own; every other test executable (unit tests,
# the model, the transcoder, the emulator, the simulation, each benchmark and example run once)
# is one step, so that a new target runs without a change here.
grep -qP '^e2e\ttest\t' "$logs/tests.tsv" && grep -qP '^e2e_slow\ttest\t' "$logs/tests.tsv" ||
  { echo "the build names no e2e or e2e_slow test executable"; exit 1; }

log "starting one Kafka broker for the whole run"
kafka_dir=$(mktemp -d "${TMPDIR:-/tmp}/kbq-kafka.XXXXXX")
declare -A step_pid=() step_started=()
cleanup() {
  local pid
  # Only the steps this script started, by their process id, and the broker it started.
  for pid in "${step_pid[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  for pid in "${step_pid[@]}"; do wait "$pid" 2>/dev/null || true; done
  "$root/scripts/kafka.sh" stop "$kafka_dir" >/dev/null 2>&1 || true
  rm -rf "$kafka_dir" "$logs/bin"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scripts/kafka.sh start "$kafka_dir"
export KBQ_KAFKA_BOOTSTRAP
KBQ_KAFKA_BOOTSTRAP=$(cat "$kafka_dir/bootstrap")
export KBQ_KAFKA_DIR="$kafka_dir"
# The tests run the daemon from a copy of this build (tests/support/daemon.rs, the Python tests):
# the Dockerfile check and the benchmark smoke build their own target/debug/kafka-bigquery-sink
# over it while the tests run.
mkdir "$logs/bin"
cp -p "$CARGO_TARGET_DIR/debug/kafka-bigquery-sink" "$logs/bin/"
export KBQ_BIN="$logs/bin/kafka-bigquery-sink"
export CARGO="${CARGO:-$(command -v cargo)}"

# Runs the test executables whose target name matches $1 (an extended regex), or, with -v,
# every other one; each as `cargo test` runs it: from its package's directory, with
# CARGO_MANIFEST_DIR, and the arguments after $1 (none but a selection of tests: libtest's own
# number of test threads; the criterion benchmarks run each benchmark once without arguments).
# Goes on after a failure, fails at the end if any failed.
run_tests() {
  local invert=() failed=() name kind manifest exe dir
  if [[ $1 == -v ]]; then invert=(-v); shift; fi
  local targets=$1
  shift
  while IFS=$'\t' read -r name kind manifest exe; do
    dir=$(dirname "$manifest")
    printf '     Running %s %s (%s) %s\n' "$kind" "$name" "$exe" "$*"
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" CARGO_MANIFEST_PATH="$manifest" "$exe" "$@") \
      || failed+=("$kind $name")
  done < <(grep -E "${invert[@]}" "^($targets)"$'\t' "$logs/tests.tsv")
  if ((${#failed[@]})); then
    echo "failed: ${failed[*]}"
    return 1
  fi
}

# Starts a step in the background, its output in $logs/NAME.log. Each step runs in a process
# group of its own (set -m), so that stopping it stops what it started; its input is /dev/null
# (a background group that read the terminal would be stopped).
step() {
  local name=$1
  shift
  set -m
  "$@" </dev/null >"$logs/$name.log" 2>&1 &
  step_pid[$name]=$!
  set +m
  step_started[$name]=$(date +%s)
  printf '    started %s (%s)\n' "$name" "$(date -u +%H:%M:%S)"
}
# Waits for the next step to end and prints its result: its summary lines when it passed, its
# whole log when it failed.
failed_steps=()
wait_step() {
  local pid name status=0
  wait -n -p pid "${step_pid[@]}" || status=$?
  for name in "${!step_pid[@]}"; do [[ ${step_pid[$name]} == "$pid" ]] && break; done
  unset "step_pid[$name]"
  if ((status == 0)); then
    printf '\n==> %s passed in %d s (%s)\n' "$name" $(($(date +%s) - step_started[$name])) \
      "$(date -u +%H:%M:%S)"
    grep -E '^( +Running |test result:|==> |[a-z-]+: ok)|[0-9]+ passed' "$logs/$name.log" || true
  else
    printf '\n==> %s FAILED (exit %d) after %d s (%s); its log:\n' "$name" "$status" \
      $(($(date +%s) - step_started[$name])) "$(date -u +%H:%M:%S)"
    cat "$logs/$name.log"
    failed_steps+=("$name")
  fi
}

# The modules of `e2e` that run in the step of `e2e_slow`, after it, so that the two steps take
# about as long (docs/developing.md has each module's time). Each is a libtest filter, a module
# path: the `e2e` step skips exactly what these select, so every test runs once (checked here).
e2e_beside_slow=(metrics_spec:: kafka_reconnect:: cdc_formats_e2e::)
e2e_skip=()
e2e_exe=$(awk -F'\t' '$1 == "e2e" && $2 == "test" {print $4}' "$logs/tests.tsv")
count_tests() { "$e2e_exe" --list "$@" | grep -c ': test$' || true; }
for filter in "${e2e_beside_slow[@]}"; do
  (($(count_tests "$filter") > 0)) || { echo "no e2e test matches $filter"; exit 1; }
  e2e_skip+=(--skip "$filter")
done
(($(count_tests "${e2e_skip[@]}") + $(count_tests "${e2e_beside_slow[@]}") == $(count_tests))) ||
  { echo "the two selections of e2e do not add up to its tests"; exit 1; }

# The steps, side by side, all from the start (docs/developing.md has the figures): the
# end-to-end tests mostly wait on the broker, the emulator and the daemon's intervals, which
# leaves the cores to the rest. Each step runs all its parts and fails if one failed.
# * The Dockerfile check builds the production binary over target/debug/kafka-bigquery-sink and
#   checks it; the benchmark smoke's build (bench/run.sh, the daemon's package alone, other
#   features) replaces it with its own and runs it. So the two run one after the other, in the
#   `builds` step; the tests run the copy in $KBQ_BIN.
# * Clippy, those two builds and nothing else take the build directory's lock; they wait for
#   each other.
# * The other test executables, libFuzzer (its own target dir) and the Go client's tests (on the
#   kbq-emulator binary, which neither build replaces) are the `others` step.
others() {
  local status=0
  log "the other test executables"
  run_tests -v 'e2e|e2e_slow' || status=1
  log "scripts/test.d/fuzz.sh"
  bash scripts/test.d/fuzz.sh || status=1
  log "scripts/test.d/go-managedwriter.sh"
  bash scripts/test.d/go-managedwriter.sh || status=1
  return $status
}
slow_then_clients() {
  local status=0
  log "e2e_slow"
  run_tests 'e2e_slow' || status=1
  log "e2e ${e2e_beside_slow[*]}"
  run_tests 'e2e' "${e2e_beside_slow[@]}" || status=1
  if ((quick == 0)); then
    log "Google's Python clients against the emulator"
    .venv/bin/python -m pytest -q tests/python || status=1
  fi
  return $status
}
lint() {
  log "cargo fmt --check"
  cargo fmt --all -- --check
  log "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
}
# The Dockerfile check, then every scripts/test.d/*.sh the other steps do not run (the benchmark
# smoke), one after the other.
builds() {
  local status=0 extra
  log "scripts/test.d/dockerfile.sh"
  bash scripts/test.d/dockerfile.sh || status=1
  for extra in scripts/test.d/*.sh; do
    case $(basename "$extra") in dockerfile.sh | fuzz.sh | go-managedwriter.sh) continue ;; esac
    log "$extra"
    bash "$extra" || status=1
  done
  return $status
}

log "the tests, side by side (logs in $logs)"
step e2e run_tests 'e2e' "${e2e_skip[@]}"
step e2e_slow slow_then_clients
step others others
step builds builds
if ((quick == 0)); then step lint lint; fi
while ((${#step_pid[@]})); do wait_step; done
if ((${#failed_steps[@]})); then
  echo "failed: ${failed_steps[*]} (logs in $logs)"
  exit 1
fi
rm -rf "$logs"
log "all tests passed"
