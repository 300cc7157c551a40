#!/usr/bin/env bash
# A model test with fresh random seeds, for as long as asked: the exactly-once protocol's
# (crates/kbq-core/tests/model/exactly_once.rs), or with --ledger the at-least-once ledger's
# (crates/kbq-core/tests/model/ledger.rs).
# The test command runs only the committed seeds; this hunts for new counterexamples.
#
#   scripts/model-soak.sh --minutes M     draw seeds until M minutes have passed
#   scripts/model-soak.sh --seeds N       run N fresh seeds
#   (both: whichever ends first)          [--release: build with optimisations, more seeds/s]
#                                         [--ledger: the at-least-once ledger's model]
#
# Every failing seed is printed as `FAILING SEED <seed>` with its shrunk input and the command
# that replays it exactly, e.g.
#   KBQ_MODEL_SEED=<seed> cargo test -p kbq-core --test model exactly_once::every_record
# The run goes on after a failure and exits non-zero at the end if any seed failed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
profile=()
model=exactly_once
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) export KBQ_MODEL_SOAK_MINUTES="${2:?--minutes needs a number}"; shift 2 ;;
        --seeds) export KBQ_MODEL_SOAK_SEEDS="${2:?--seeds needs a number}"; shift 2 ;;
        --release) profile=(--release); shift ;;
        --ledger) model=ledger; shift ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
if [ -z "${KBQ_MODEL_SOAK_MINUTES:-}" ] && [ -z "${KBQ_MODEL_SOAK_SEEDS:-}" ]; then
    usage
fi
exec cargo test "${profile[@]}" --locked -p kbq-core --test model "$model::soak_with_fresh_random_seeds" \
    -- --ignored --nocapture
