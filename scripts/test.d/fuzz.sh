#!/usr/bin/env bash
# Coverage-guided fuzzing of the transcoder (fuzz/), bounded in time. The stable, bounded
# mutation fuzzer (tests/transcode_fuzz.rs) already ran inside `cargo test`; this adds libFuzzer
# where a nightly toolchain exists (cargo-fuzz needs it for the sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${KBQ_FUZZ_SECONDS:-30}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain on this machine: coverage-guided fuzzing skipped (the bounded stable fuzzer ran in cargo test)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --locked cargo-fuzz >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}-fuzz"
cd fuzz
cargo +nightly fuzz run transcode -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | tail -n 5
