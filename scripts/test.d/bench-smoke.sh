#!/usr/bin/env bash
# The benchmark at a tiny size (debug build, the test run's broker): it must run through and print
# its table. Timings are not checked; they mean nothing at this size.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d "${TMPDIR:-/tmp}/kbq-bench-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT
bench/run.sh --profile debug --records 20000 --partitions 4 --latency-rate 500 \
  --latency-secs 2 --checkpoint-interval 500ms --out "$out" | tee "$out/stdout.txt"
grep -q '^| run | records |' "$out/stdout.txt" || { echo "bench-smoke: no table printed"; exit 1; }
grep -q '^| raw consumer | 20000 |' "$out/stdout.txt" || { echo "bench-smoke: raw row missing"; exit 1; }
grep -q '^| sink exactly_once | 20000 |' "$out/stdout.txt" || {
  echo "bench-smoke: exactly-once row missing"
  exit 1
}
# every record visible exactly once after the graceful stop
python3 - "$out/results.json" <<'EOF'
import json, sys
r = {x["name"]: x for x in json.load(open(sys.argv[1]))["results"]}
eo = r["sink exactly_once"]
assert eo.get("visible_rows_exact") is True, eo
EOF
echo "bench-smoke: ok"
