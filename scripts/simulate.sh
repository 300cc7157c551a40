#!/usr/bin/env bash
# The deterministic simulation of the shells (docs/simulation.md) with fresh random seeds, for as
# long as asked; the test command runs only its fixed, committed seeds.
#
#   scripts/simulate.sh --minutes 60          fresh seeds for an hour of wall time
#   scripts/simulate.sh --seeds 500           500 fresh seeds
#   scripts/simulate.sh --seed 123            replay one seed (prints its trace hash)
#   options: --mode M (the route the seeds run: exactly_once, at_least_once, cdc (upsert_delete,
#            every fourth seed upsert), or all: the modes in turn by seed, CDC half of them; the
#            default is all for fresh seeds, exactly_once for --seed),
#            --release (an optimised build: ~10x faster per seed, one long compile),
#            --first-seed N (start of the seed range; default: from the clock),
#            --faulty-seconds S (virtual time with faults per seed, default 120),
#            --on-missing-checkpoint fail (the default policy, not earliest: docs/operations.md),
#            --retention (Kafka deletes records 4 s after they were produced and the processes run
#            recovery.on_out_of_range: earliest; exactly once and at least once seeds only),
#            --max-uncommitted-bytes B (writer.max_uncommitted_bytes of the processes, so that the
#            protocol pauses partitions; exactly once seeds only)
#   KBQ_SIM_TRACE=1 prints every step of the trace as it happens.
#
# Progress lines give the seeds run, the simulated hours and the failures; a failing seed prints
# itself, its last steps and the command that replays it, and the run goes on. The exit status
# is non-zero when a seed failed.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) export KBQ_SIM_MINUTES="$2"; shift 2 ;;
    --seeds) export KBQ_SIM_SEEDS="$2"; shift 2 ;;
    --seed) export KBQ_SIM_SEED="$2"; shift 2 ;;
    --mode) export KBQ_SIM_MODE="$2"; shift 2 ;;
    --first-seed) export KBQ_SIM_FIRST_SEED="$2"; shift 2 ;;
    --faulty-seconds) export KBQ_SIM_FAULTY_SECONDS="$2"; shift 2 ;;
    --on-missing-checkpoint) export KBQ_SIM_MISSING_CHECKPOINT="$2"; shift 2 ;;
    --retention) export KBQ_SIM_RETENTION=1; shift ;;
    --max-uncommitted-bytes) export KBQ_SIM_MAX_UNCOMMITTED_BYTES="$2"; shift 2 ;;
    --release) profile=(--release); shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
if [ -z "${KBQ_SIM_MINUTES:-}${KBQ_SIM_SEEDS:-}${KBQ_SIM_SEED:-}" ]; then
  echo "give --minutes M, --seeds N or --seed S" >&2
  exit 2
fi
exec cargo test "${profile[@]}" --locked -p kbq-sim --lib tests::simulate \
  -- --ignored --exact --nocapture
