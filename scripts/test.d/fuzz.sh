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
# Avro, then the Protobuf and JSON cases (the Protobuf one is
# crates/kbq-transcode/tests/transcode/support/proto_case.rs), each from an empty corpus with
# the same seed. The Protobuf and JSON targets run each input through the executor and its
# reference and ran about 5,000 inputs a second here, so they get fewer runs.
other_runs="${KBQ_FUZZ_OTHER_RUNS:-50000}"
for target in transcode transcode_protobuf transcode_json; do
  n=$other_runs
  [ "$target" = transcode ] && n=$runs
  mkdir "$corpus/$target"
  echo "fuzz: $target, $n runs"
  cargo +nightly fuzz run "$target" "$corpus/$target" -- -seed=1 -runs="$n" -rss_limit_mb=2048 2>&1 | tail -n 5
done
