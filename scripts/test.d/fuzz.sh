#!/usr/bin/env bash
# Coverage-guided fuzzing of the transcoder (fuzz/), deterministic: a fixed libFuzzer seed, a
# fixed number of runs and an empty corpus, so the test command passes or fails the same way on
# every run (fresh random seeds: scripts/fuzz-soak.sh). The stable mutation fuzzer
# (crates/kbq-transcode/tests/transcode/fuzz.rs) already ran its committed seeds inside `cargo test`; this adds
# libFuzzer where a nightly toolchain exists (cargo-fuzz needs it for the sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${KBQ_FUZZ_RUNS:-1000000}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain on this machine: coverage-guided fuzzing skipped (the bounded stable fuzzer ran in cargo test)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --locked cargo-fuzz >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}-fuzz"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cd fuzz
cargo +nightly fuzz run transcode "$corpus" -- -seed=1 -runs="$runs" -rss_limit_mb=2048 2>&1 | tail -n 5
