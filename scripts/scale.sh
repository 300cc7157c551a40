#!/usr/bin/env bash
# The full scale test (tests/e2e_slow/sink_scale.rs): several replicas of the daemon on many partitions
# through a real broker, against the emulator in quota mode; prints the figures of
# docs/operations.md "Capacity planning" as `scale:` lines. The test command runs a small size.
#
#   scripts/scale.sh [--partitions N] [--replicas R] [--rounds K] [--burst B] [--release]
#
# Defaults: 1200 partitions, 3 replicas, 3 low-volume rounds, a burst of 20 records per
# partition. Without KBQ_KAFKA_BOOTSTRAP the test starts a private broker (scripts/kafka.sh) with
# Kafka's default broker.session.timeout.ms (9 s) and a 1 GiB heap instead of the test broker's
# 2 s and 512 MiB: on a loaded two-core machine the single node's controller, busy with a
# thousand partitions, answered its own broker's heartbeat later than 2 s, fenced the broker and
# left every partition (and the group coordinator) without a leader, once a minute; the replicas
# then lost the group on session timeout and their partitions moved (docs/operations.md). A
# broker given through KBQ_KAFKA_BOOTSTRAP needs the same. The daemons' pids are printed
# (`scale: replica ... pid`): stop a run by those pids only.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
export KBQ_SCALE_PARTITIONS=1200 KBQ_SCALE_REPLICAS=3 KBQ_SCALE_ROUNDS=3 KBQ_SCALE_BURST=20
profile=()
while [ $# -gt 0 ]; do
    case "$1" in
        --partitions) KBQ_SCALE_PARTITIONS="${2:?--partitions needs a number}"; shift 2 ;;
        --replicas) KBQ_SCALE_REPLICAS="${2:?--replicas needs a number}"; shift 2 ;;
        --rounds) KBQ_SCALE_ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --burst) KBQ_SCALE_BURST="${2:?--burst needs a number}"; shift 2 ;;
        --release) profile=(--release); shift ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
if [ -z "${KBQ_KAFKA_BOOTSTRAP:-}" ]; then
    export KBQ_KAFKA_BROKER_SESSION_MS="${KBQ_KAFKA_BROKER_SESSION_MS:-9000}"
    export KBQ_KAFKA_HEAP="${KBQ_KAFKA_HEAP:-1g}"
fi
exec cargo test "${profile[@]}" --locked --test e2e_slow sink_scale::replicas_on_many_partitions -- --nocapture
