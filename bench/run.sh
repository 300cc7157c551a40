#!/usr/bin/env bash
# The end-to-end benchmark (BENCHMARKS.md): raw Kafka consumption against the sink, one command.
#
#   bench/run.sh [--records N] [--partitions P] [--out DIR] [--profile release|debug]
#                [--latency-rate R] [--latency-secs S] [--checkpoint-interval D] [--modes M] [--perf]
#                [--perf-stat] [--wrap CMD]
#                [--layouts L] [--sink-core N] [--raw-tolerance F]
#                [--perf-emulator] [--emulator-bin PATH] [--emulator-keep-all] [--sink-bin PATH]
#                [--consumer-property KEY=VALUE]... [--writer KEY=VALUE]...
#
# Builds the sink and the driver (examples/kbq-bench), starts a Kafka broker (scripts/kafka.sh;
# with KBQ_KAFKA_BOOTSTRAP set, that broker is used instead) and the emulator as its own process,
# then runs `kbq-bench run`, which preloads the topic and measures each mode in two layouts:
# pinned (the sink, or the raw consumer, alone on one core under taskset; the broker, the emulator
# and the driver on the others) and unpinned (everything on every core), with the raw consumer
# before and after every sink run. The tables go to stdout and DIR/results.txt, the figures to
# DIR/results.json; configs and daemon logs stay in DIR.
# The emulator validates every row whole but keeps only the Kafka metadata columns the driver
# reads (--keep-columns): it holds what it keeps for its lifetime, and 2 GB of fresh pages cost
# it more CPU than the sink's whole drain on these shared cores. --emulator-keep-all keeps rows.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

records=2000000
partitions=16
out=""
profile=release
extra=()
perf_emulator=0
emulator_bin=""
measured_sink=""
# `sequence` is the CDC mode's primary key: the emulator applies changes by it
keep_columns="_kafka_partition,_kafka_offset,_kafka_timestamp,sequence"
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --records) records="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --perf) extra+=(--perf); shift ;;
    # task clock, context switches, migrations and page faults of each sink's drain
    --perf-stat) extra+=(--perf-stat); shift ;;
    # the emulator's profile over the whole run (DIR/perf-emulator.data)
    --perf-emulator) perf_emulator=1; shift ;;
    # another build of the binary as the emulator (A/B of emulator changes, same sink)
    --emulator-bin) emulator_bin="$2"; shift 2 ;;
    # another build of the sink is the one measured (A/B of two commits under the same method,
    # driver and emulator; BENCHMARKS.md, "Code, method or machine")
    --sink-bin) measured_sink="$2"; shift 2 ;;
    # the emulator keeps every column of every row (as it does outside benchmarks)
    --emulator-keep-all) keep_columns=""; shift ;;
    --latency-rate | --latency-secs | --checkpoint-interval | --modes | --stall-secs | \
      --consumer-property | --writer | --layouts | --sink-core | --raw-tolerance | --wrap)
      extra+=("$1" "$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$profile" == release || "$profile" == debug ]] || { echo "--profile release|debug" >&2; exit 2; }
out="${out:-$root/bench/out/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
out=$(cd "$out" && pwd)

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}"
log() { printf 'bench: %s\n' "$*" >&2; }

flags=(--locked --bin kafka-bigquery-sink --example kbq-bench)
[[ "$profile" == release ]] && flags+=(--release)
log "building ($profile)"
cargo build "${flags[@]}" >&2
bin_dir="$CARGO_TARGET_DIR/$profile"
sink="$bin_dir/kafka-bigquery-sink"
driver="$bin_dir/examples/kbq-bench"

work=$(mktemp -d "${TMPDIR:-/tmp}/kbq-bench.XXXXXX")
emulator_pid=""
perf_pid=""
broker_pid=""
# the cores this script may use: the broker gets them back at exit (the pinned layout moves it)
all_cores=$(taskset -c -p $$ | sed 's/.*: //')
cleanup() {
  if [[ -n "$broker_pid" ]]; then
    taskset -a -c -p "$all_cores" "$broker_pid" >/dev/null 2>&1 || true
  fi
  if [[ -n "$perf_pid" ]]; then
    # perf writes its file on SIGINT
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
  fi
  if [[ -n "$emulator_pid" ]]; then
    kill -TERM "$emulator_pid" 2>/dev/null || true
    wait "$emulator_pid" 2>/dev/null || true
  fi
  if [[ -f "$work/kafka/pid" ]]; then
    "$root/scripts/kafka.sh" stop "$work/kafka" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n "${KBQ_KAFKA_BOOTSTRAP:-}" ]]; then
  bootstrap="$KBQ_KAFKA_BOOTSTRAP"
  log "using the broker at $bootstrap"
  # scripts/kafka.sh's directory, when given, names the broker's pid (to pin it)
  if [[ -n "${KBQ_KAFKA_DIR:-}" && -r "$KBQ_KAFKA_DIR/pid" ]]; then
    broker_pid=$(cat "$KBQ_KAFKA_DIR/pid")
  fi
else
  scripts/kafka.sh fetch
  mkdir -p "$work/kafka"
  # the watchdog stops the broker even if this script is killed
  bootstrap=$(KBQ_KAFKA_HEAP="${KBQ_KAFKA_HEAP:-1g}" scripts/kafka.sh start "$work/kafka" --parent $$)
  broker_pid=$(cat "$work/kafka/pid")
  log "broker at $bootstrap (pid $broker_pid)"
fi
log "load before: $(uptime)"
[[ -n "$measured_sink" ]] && log "measuring the sink $measured_sink"

emulator_flags=(--listen 127.0.0.1:0)
[[ -n "$keep_columns" ]] && emulator_flags+=(--keep-columns "$keep_columns")
"${emulator_bin:-$sink}" emulator "${emulator_flags[@]}" >"$work/emulator.out" 2>"$out/emulator.log" &
emulator_pid=$!
emulator=""
for _ in $(seq 1 300); do
  emulator=$(sed -n 's/^emulator listening on //p' "$work/emulator.out" | head -n1)
  [[ -n "$emulator" ]] && break
  kill -0 "$emulator_pid" 2>/dev/null || { cat "$out/emulator.log" >&2; log "the emulator exited"; exit 1; }
  sleep 0.1
done
[[ -n "$emulator" ]] || { log "the emulator printed no address within 30s"; exit 1; }
log "emulator at $emulator (pid $emulator_pid)"
if ((perf_emulator)); then
  perf record -F 999 -g -o "$out/perf-emulator.data" -p "$emulator_pid" >/dev/null 2>&1 &
  perf_pid=$!
  log "profiling the emulator into $out/perf-emulator.data"
fi

broker_flags=()
[[ -n "$broker_pid" ]] && broker_flags=(--broker-pid "$broker_pid")
"$driver" run --bootstrap "$bootstrap" --emulator "$emulator" --emulator-pid "$emulator_pid" \
  --sink-bin "${measured_sink:-$sink}" --records "$records" --partitions "$partitions" --out "$out" \
  --emulator-keep-columns "${keep_columns:-all}" "${broker_flags[@]}" "${extra[@]}"
log "load after: $(uptime)"
