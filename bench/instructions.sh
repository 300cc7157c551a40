#!/usr/bin/env bash
# Instructions per GB, sink against the raw consumer, counted by valgrind (BENCHMARKS.md,
# "Instructions, not seconds"): deterministic user-space counts that do not move with the host's
# frequency or load.
#
#   bench/instructions.sh [--records N1,N2] [--partitions P] [--out DIR] [--sink-bin PATH]
#                         [--report-only]
#
# Runs bench/run.sh twice (N1 then N2 records, 16 partitions, exactly once, unpinned), each
# measured process (raw consumer, sink, raw consumer) under `valgrind --tool=callgrind`. The
# figures are the differences between the two runs divided by the difference of their bytes: the
# cost of the extra records alone, without start-up, group join and shutdown. The timings the
# sink's config would otherwise trip over valgrind's ~50x slowdown are raised for these runs
# (session timeout 60 s, checkpoint interval 10 s, linger 2 s, response timeout 600 s), and so is
# librdkafka's statistics interval (60 s), whose cost follows the wall clock. Output:
# DIR/instructions.txt (the tables), DIR/functions.tsv (per function, inclusive and self counts
# of the extra records per GB), DIR/nN1 and DIR/nN2 (the runs, their callgrind.*.out files).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

sizes=20000,50000
partitions=16
out=""
sink_bin=()
# --report-only: the tables again from the callgrind files of an earlier run in DIR
report_only=0
while (($#)); do
  case "$1" in
    --records) sizes="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sink-bin) sink_bin=(--sink-bin "$2"); shift 2 ;;
    --report-only) report_only=1; shift ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/instructions.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "bench/instructions.sh: needs valgrind" >&2; exit 2; }
command -v callgrind_annotate >/dev/null || { echo "bench/instructions.sh: needs callgrind_annotate" >&2; exit 2; }
IFS=, read -r small large <<<"$sizes"
((small > 0 && large > small)) || { echo "--records N1,N2 with 0 < N1 < N2" >&2; exit 2; }
out="${out:-$root/bench/out/instructions-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { printf 'instructions: %s\n' "$*" >&2; }

for n in "$small" "$large"; do
  ((report_only)) && break
  dir="$out/n$n"
  mkdir -p "$dir"
  log "$n records under callgrind into $dir"
  bench/run.sh --records "$n" --partitions "$partitions" --out "$dir" \
    --modes exactly_once --layouts unpinned --latency-rate 0 --stall-secs 900 \
    --checkpoint-interval 10s --writer linger=2s --writer response_timeout=600s \
    --consumer-property session.timeout.ms=60000 --consumer-property heartbeat.interval.ms=3000 \
    --consumer-property statistics.interval.ms=60000 \
    "${sink_bin[@]}" \
    --wrap "valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes --callgrind-out-file=$dir/callgrind.%q{KBQ_BENCH_PHASE}.out" \
    >"$dir/run.out" 2>"$dir/run.err" || { tail -n 30 "$dir/run.err" >&2; exit 1; }
done

# The thread a callgrind file (one per thread, --separate-threads) holds, by the function at its
# root.
thread_of() {
  # in this order: a file names the functions of other threads too (the consumer thread's
  # names librdkafka's broker loop)
  if grep -q 'kafka_bigquery_sink::kafka::consumer::run$' "$1"; then echo "consumer thread"
  elif grep -q 'multi_thread::worker::run$' "$1"; then echo "tokio workers"
  elif grep -q 'rd_kafka_broker_thread_main' "$1"; then echo "librdkafka broker threads"
  elif grep -q 'rd_kafka_thread_main' "$1"; then echo "librdkafka main threads"
  elif grep -q 'blocking::pool::Inner::run$' "$1"; then echo "tokio blocking threads"
  else echo "main thread, others"; fi
}

# Per thread and function of a phase's callgrind files: "thread<TAB>inclusive<TAB>self<TAB>name".
functions() {
  local file
  for file in "$@"; do
    local thread
    thread=$(thread_of "$file")
    { callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$file" | sed 's/^/I /'
      callgrind_annotate --auto=no --inclusive=no --threshold=100 "$file" | sed 's/^/S /'; } |
      awk -v thread="$thread" '
        # "I 1,234 (12.3%)  file:function [object]" or without the percentage
        ($1 == "I" || $1 == "S") && $2 ~ /^[0-9,]+$/ {
          kind = $1; n = $2; gsub(",", "", n)
          line = $0; sub(/^[IS] +[0-9,]+ +(\([^)]*\) +)?/, "", line)
          sub(/ \[[^]]*\]$/, "", line)
          if (line == "PROGRAM TOTALS") next
          # file:function; the file never holds a colon, a Rust path does
          at = index(line, ":"); name = substr(line, at + 1)
          if (kind == "I") inc[name] += n; else slf[name] += n
          seen[name] = 1
        }
        END { for (f in seen) printf "%s\t%.0f\t%.0f\t%s\n", thread, inc[f], slf[f], f }'
  done | awk -F'\t' '
    { k = $1 "\t" $4; inc[k] += $2; slf[k] += $3 }
    END { for (k in inc) { split(k, a, "\t"); printf "%s\t%.0f\t%.0f\t%s\n", a[1], inc[k], slf[k], a[2] } }'
}

# Calls of the functions whose name matches a regex, from a callgrind file's call records.
calls() {
  local re=$1
  awk -v re="$re" '
    FNR == 1 { delete name }
    /^c?fn=/ {
      s = $0; sub(/^c?fn=/, "", s)
      if (match(s, /^\([0-9]+\)/)) {
        id = substr(s, 1, RLENGTH); rest = substr(s, RLENGTH + 2)
        if (rest != "") name[id] = rest
        n = name[id]
      } else n = s
      if ($0 ~ /^cfn=/) cfn = n
    }
    /^calls=/ { split(substr($0, 7), a, " "); if (cfn ~ re) c += a[1] }
    END { printf "%.0f\n", c }' "${@:2}"
}

# The instructions of a phase: the sum over its threads' files.
total() { cat "$@" | awk '/^totals:/ { t += $2 } END { printf "%.0f\n", t }'; }

# bytes of a phase from results.json: the sink's row, or raw consumer K
bytes_of() {
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(next(r["bytes"] for l in d["layouts"] for r in l["results"] if r["name"] == sys.argv[2]))' "$1" "$2"
}

report="$out/instructions.txt"
{
  echo "bench/instructions.sh --records $small,$large --partitions $partitions ${sink_bin[*]}"
  echo "load: $(uptime)"
  echo
  printf '%-28s %16s %16s %18s\n' phase "Ir ($small)" "Ir ($large)" "Ir per GB (extra)"
} >"$report"
declare -A per_gb gb
for phase in raw-1 sink-unpinned-exactly_once raw-2; do
  name=$phase
  [[ $phase == raw-* ]] && name="raw consumer ${phase#raw-}"
  [[ $phase == sink-* ]] && name="sink exactly_once"
  ia=$(total "$out/n$small/callgrind.$phase.out-"*)
  ib=$(total "$out/n$large/callgrind.$phase.out-"*)
  ba=$(bytes_of "$out/n$small/results.json" "$name")
  bb=$(bytes_of "$out/n$large/results.json" "$name")
  gb[$phase]=$(awk -v ba="$ba" -v bb="$bb" 'BEGIN { print (bb - ba) / 1e9 }')
  per_gb[$phase]=$(awk -v ia="$ia" -v ib="$ib" -v g="${gb[$phase]}" 'BEGIN { printf "%.0f", (ib - ia) / g }')
  printf '%-28s %16s %16s %18s\n' "$phase" "$ia" "$ib" "${per_gb[$phase]}" >>"$report"
done
sink=sink-unpinned-exactly_once
awk -v s="${per_gb[$sink]}" -v r1="${per_gb[raw-1]}" -v r2="${per_gb[raw-2]}" '
  BEGIN {
    r = (r1 + r2) / 2
    printf "\nsink / raw (mean of its two runs): %.2f   (the raw runs differ by %.2f %%)\n", s / r, 100 * (r1 > r2 ? r1 - r2 : r2 - r1) / (r1 < r2 ? r1 : r2)
  }' >>"$report"

# Per thread and function, the extra records' counts (large run minus small run) per GB of their
# bytes: "thread<TAB>inclusive<TAB>self<TAB>name", largest self first.
extra() {
  local phase=$1
  functions "$out/n$small/callgrind.$phase.out-"* | sort -t$'\t' -k1,1 -k4 >"$out/small-$phase.tsv"
  functions "$out/n$large/callgrind.$phase.out-"* | sort -t$'\t' -k1,1 -k4 >"$out/large-$phase.tsv"
  awk -F'\t' -v gb="${gb[$phase]}" '
    FNR == NR { k = $1 "\t" $4; si[k] = $2; ss[k] = $3; next }
    { k = $1 "\t" $4; printf "%s\t%.0f\t%.0f\t%s\n", $1, ($2 - si[k]) / gb, ($3 - ss[k]) / gb, $4 }' \
    "$out/small-$phase.tsv" "$out/large-$phase.tsv" | sort -t$'\t' -k3,3nr >"$out/functions-$phase.tsv"
  rm -f "$out/small-$phase.tsv" "$out/large-$phase.tsv"
}
extra "$sink"
extra raw-1

# Self counts by "thread<TAB>place" of a functions-*.tsv.
by_place() {
  awk -F'\t' '
    {
      f = $4; c = "other"
      if (f ~ /^rd_/) c = "librdkafka"
      else if (f ~ /(memmove|memcpy|memset)/) c = "memcpy, memmove, memset (libc)"
      else if (f ~ /^(_int_malloc|_int_free|_int_realloc|malloc|free|cfree|realloc|calloc|malloc_consolidate|unlink_chunk|tcache|arena_get|__libc_malloc|__libc_free|__libc_realloc|__libc_calloc)/) c = "allocator (glibc)"
      else if (f ~ /^<?kbq_transcode/) c = "transcoding (kbq_transcode)"
      else if (f ~ /^<?tokio::(runtime|task|time|io)/) c = "tokio runtime (scheduler, timers, io)"
      else if (f ~ /^<?tokio::sync/) c = "tokio sync (channels, semaphores)"
      else if (f ~ /^<?(h2|hyper|tonic|tower|http_body|http|hyper_util)::/) c = "tonic, h2, hyper, tower"
      else if (f ~ /^<?prost/) c = "prost"
      else if (f ~ /^<?bytes::/) c = "bytes"
      else if (f ~ /^<?(kafka_bigquery_sink|kbq_core|kbq_bench)/) c = "our crates (the driver for raw)"
      else if (f ~ /^<?rdkafka::/) c = "rust-rdkafka"
      else if (f ~ /^<?(core|alloc|std)::/) c = "Rust core, alloc, std"
      else if (f ~ /^<?tokio/) c = "tokio other"
      else if (f ~ /(pthread|futex|lll_|mtx_|mutex|cond|clock_gettime|vdso|syscall|epoll|^read|^write|^send|^recv|^poll|^__)/) c = "libc (locks, clock, syscall stubs)"
      t[$1] += $3; p[c] += $3; tp[$1 "\t" c] += $3
    }
    END {
      for (k in t) printf "thread\t%s\t%.0f\n", k, t[k]
      for (k in p) printf "place\t%s\t%.0f\n", k, p[k]
      for (k in tp) printf "both\t%s\t%.0f\n", k, tp[k]
    }' "$1"
}
by_place "$out/functions-$sink.tsv" >"$out/places-$sink.tsv"
by_place "$out/functions-raw-1.tsv" >"$out/places-raw-1.tsv"

{
  echo
  echo "per GB of the extra records, by thread (self counts summed; share of the sink's total):"
  printf '  %-44s %14s %7s %14s\n' thread sink share raw
  join -t$'\t' -a1 -a2 -e0 -o 0,1.2,2.2 \
    <(awk -F'\t' '$1 == "thread" { print $2 "\t" $3 }' "$out/places-$sink.tsv" | sort) \
    <(awk -F'\t' '$1 == "thread" { print $2 "\t" $3 }' "$out/places-raw-1.tsv" | sort) |
    sort -t$'\t' -k2,2nr |
    awk -F'\t' -v t="${per_gb[$sink]}" '{ printf "  %-44s %14.0f %6.1f%% %14.0f\n", $1, $2, 100 * $2 / t, $3 }'
  echo
  echo "per GB of the extra records, by where the code is (self counts; share of the sink's total):"
  printf '  %-44s %14s %7s %14s\n' where sink share raw
  join -t$'\t' -a1 -a2 -e0 -o 0,1.2,2.2 \
    <(awk -F'\t' '$1 == "place" { print $2 "\t" $3 }' "$out/places-$sink.tsv" | sort) \
    <(awk -F'\t' '$1 == "place" { print $2 "\t" $3 }' "$out/places-raw-1.tsv" | sort) |
    sort -t$'\t' -k2,2nr |
    awk -F'\t' -v t="${per_gb[$sink]}" '{ printf "  %-44s %14.0f %6.1f%% %14.0f\n", $1, $2, 100 * $2 / t, $3 }'
  echo
  echo "the sink by thread and place (self counts per GB of the extra records, the largest 30):"
  awk -F'\t' '$1 == "both" { print $4 "\t" $2 "\t" $3 }' "$out/places-$sink.tsv" | sort -t$'\t' -k1,1nr | head -n 30 |
    awk -F'\t' -v t="${per_gb[$sink]}" '{ printf "  %-28s %-44s %14.0f %6.1f%%\n", $2, $3, $1, 100 * $1 / t }'
  rows=$(( $(calls '^kbq_transcode::Plan::transcode$' "$out/n$large/callgrind.$sink.out-"*) - $(calls '^kbq_transcode::Plan::transcode$' "$out/n$small/callgrind.$sink.out-"*) ))
  if ((rows > 0)); then
    echo
    awk -v rows="$rows" -v gb="${gb[$sink]}" -v t="${per_gb[$sink]}" \
      -v tr="$(awk -F'\t' '$4 ~ /^<?kbq_transcode/ { s += $3 } END { print s + 0 }' "$out/functions-$sink.tsv")" \
      'BEGIN { printf "per record (%d extra rows transcoded): the sink %.0f Ir, of which in kbq_transcode %.0f\n", rows, t * gb / rows, tr * gb / rows }'
  fi
  echo
  echo "the sink's top 50 functions by self count (Ir per GB of the extra records: self, inclusive; thread):"
  echo "(inclusive counts of optimised code with tail calls and inlining are overstated by callgrind: read the self column)"
  head -n 50 "$out/functions-$sink.tsv" |
    awk -F'\t' '{ printf "  %13s %14s  %-26s %s\n", $3, $2, $1, substr($4, 1, 130) }'
} >>"$report"
cat "$report"
