#!/usr/bin/env bash
# The fuzzers and generator-driven property tests with fresh random seeds, for as long as asked.
# The test command runs them on committed seeds and fixed counts only (fuzz.rs and props.rs in
# crates/kbq-transcode/tests/transcode/, the emulator's rows/validate_tests.rs,
# scripts/test.d/fuzz.sh); this hunts for new failures. (The model tests and the simulation have their own: model-soak.sh,
# simulate.sh.)
#
#   scripts/fuzz-soak.sh --minutes M      M minutes of the stable mutation fuzzer's fresh seeds,
#                                         M minutes of the property tests, each run with a fresh
#                                         seed, then M minutes of libFuzzer on each of its three
#                                         targets (Avro, Protobuf, JSON) with a random seed (when
#                                         a nightly toolchain is installed)
#
# A failing mutation-fuzzer seed is printed with `FUZZ_SEED=<seed>`, which replays it:
#   FUZZ_SEED=<seed> cargo test -p kbq-transcode --test transcode fuzz::
# libFuzzer writes a crashing input to fuzz/artifacts/<target>/ (replay: cargo +nightly fuzz run
# <target> <file>). Every failure found becomes a committed seed or a committed test case.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
minutes=
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="${2:?--minutes needs a number}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$minutes" ] || usage
seconds=$((minutes * 60))

if ! out=$(KBQ_FUZZ_FRESH_SECONDS="$seconds" cargo test --locked -p kbq-transcode --test transcode -- fuzz:: --nocapture 2>&1); then
    echo "fuzz-soak: crates/kbq-transcode/tests/transcode/fuzz.rs failed on a fresh seed:"
    echo "$out" | grep -v '^fuzz: fresh seed' | tail -n 40
    exit 1
fi
echo "$out" | grep -E '^fuzz: [0-9]+ fresh seeds|test result'

# proptest prints the minimal failing input of a failure; keep it as a test case.
end=$((SECONDS + seconds))
runs=0
while [ "$SECONDS" -lt "$end" ]; do
    if ! out=$(KBQ_PROPTEST_FRESH=1 cargo test --locked -p kbq-transcode --test transcode -- props:: --skip json_props:: 2>&1); then
        echo "fuzz-soak: crates/kbq-transcode/tests/transcode/props.rs failed on a fresh seed:"; echo "$out" | tail -n 40; exit 1
    fi
    if ! out=$(KBQ_PROPTEST_FRESH=1 cargo test --locked -p kbq-emulator rows::validate_tests 2>&1); then
        echo "fuzz-soak: the emulator's row property tests failed on a fresh seed:"; echo "$out" | tail -n 40; exit 1
    fi
    runs=$((runs + 1))
done
echo "fuzz-soak: property tests passed on $runs fresh seeds each"

if ! cargo +nightly --version >/dev/null 2>&1 || ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-soak: no nightly toolchain or cargo-fuzz: libFuzzer skipped (scripts/test.sh installs cargo-fuzz)"
    exit 0
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}-fuzz"
cd fuzz
# -seed=0: libFuzzer draws its seed from the clock and prints it (INFO: Seed: N). The targets are
# the ones scripts/test.d/fuzz.sh runs on a fixed seed.
for target in transcode transcode_protobuf transcode_json; do
    echo "fuzz-soak: libFuzzer $target, $minutes minutes"
    cargo +nightly fuzz run "$target" -- -seed=0 -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 |
        grep -E 'INFO: Seed|Done|crash|ERROR' | tail -n 5
done
