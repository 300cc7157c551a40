#!/usr/bin/env bash
# The benchmark at a tiny size (debug build, the test run's broker): it must run through both
# layouts and every mode and print its tables, and every record must be visible exactly once.
# Timings are not checked; they mean nothing at this size.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d "${TMPDIR:-/tmp}/kbq-bench-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT
layouts=pinned,unpinned
(($(nproc) >= 2)) || layouts=unpinned
bench/run.sh --profile debug --records 20000 --partitions 4 --latency-rate 500 \
  --latency-secs 1 --checkpoint-interval 500ms --layouts "$layouts" --out "$out" |
  tee "$out/stdout.txt"
fail() { echo "bench-smoke: $*"; exit 1; }
grep -q '^| run | records |' "$out/stdout.txt" || fail "no table printed"
grep -q '^load before: ' "$out/stdout.txt" || fail "no load before"
grep -q '^load after: ' "$out/stdout.txt" || fail "no load after"
for layout in ${layouts//,/ }; do
  grep -q "^### $layout " "$out/stdout.txt" || fail "no $layout table"
done
grep -q '^| raw consumer 1 | 20000 |' "$out/stdout.txt" || fail "raw row missing"
grep -q '^| sink exactly_once | 20000 |' "$out/stdout.txt" || fail "exactly-once row missing"
grep -q '^| sink cdc | ' "$out/stdout.txt" || fail "cdc row missing"
# every sink run of every layout: every record visible exactly once, and a raw run on each side
python3 - "$out/results.json" "$layouts" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
layouts = doc["layouts"]
assert [l["layout"] for l in layouts] == sys.argv[2].split(","), layouts
for l in layouts:
    names = [r["name"] for r in l["results"]]
    assert names == ["raw consumer 1", "sink exactly_once", "raw consumer 2",
                     "sink at_least_once", "raw consumer 3", "sink cdc", "raw consumer 4"], names
    for r in l["results"]:
        # where the CPU went (BENCHMARKS.md, Method 4): the split and the threads, for every run
        detail = r["cpu_detail"]["process"] if r["name"].startswith("sink") else r["cpu_detail"]
        assert detail["user_seconds"] >= 0 and detail["threads"], (l["layout"], r["name"])
        if r["name"].startswith("sink"):
            assert r["cpu_detail"]["cpu_seconds_at_first_record"] is not None, r
            assert r.get("visible_rows_exact") is True, (l["layout"], r)
            assert r["raw_baseline"] is not None, r
            if l["layout"] == "pinned":
                assert r["core_to_others_pct"] is not None, r
EOF
echo "bench-smoke: ok"
