#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft, combined broker + controller) on loopback for the tests.
#
#   scripts/kafka.sh fetch                 download the broker's jars once (Maven, cached)
#   scripts/kafka.sh start DIR [--parent PID] [--remove-dir] [--sasl]
#                                          format DIR, start a broker on free loopback ports, wait
#                                          until it serves, write DIR/bootstrap and DIR/pid, print
#                                          the bootstrap address. With --parent, a watchdog stops
#                                          the broker (and with --remove-dir deletes DIR) once PID
#                                          has exited, however it exited. With --sasl, a second
#                                          listener, SASL_PLAINTEXT with PLAIN (users `admin`,
#                                          password `admin-secret`, a super user, and `sink`,
#                                          password `sink-secret`), written to DIR/sasl_bootstrap,
#                                          and Kafka's StandardAuthorizer: a principal without an
#                                          ACL may do nothing. The PLAINTEXT listener stays open
#                                          to its anonymous principal, a super user, for the
#                                          broker itself and the tests' own setup.
#   scripts/kafka.sh stop DIR [--hard]     stop exactly the broker whose pid is in DIR/pid
#                                          (--hard: SIGKILL, a crash for chaos tests)
#   scripts/kafka.sh restart DIR [--hard]  stop, then start again on the same ports and log dir
#   scripts/kafka.sh run DIR -- CMD...     start, run CMD with KBQ_KAFKA_BOOTSTRAP set, stop
#                                          (also when CMD or this script is interrupted)
#
# Environment: KBQ_KAFKA_CACHE (jar cache root, default $HOME/.cache/kbq),
# KBQ_KAFKA_START_TIMEOUT (seconds, default 90), KBQ_KAFKA_HEAP (default 512m),
# KBQ_KAFKA_BROKER_SESSION_MS (the node's broker.session.timeout.ms, default 2000: a restarted
# node waits that long for its old registration; a busy node whose controller does not answer its
# own heartbeat within it is fenced, every partition leaderless, so large topics on a loaded
# machine need more, see scripts/scale.sh).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
CACHE_ROOT="${KBQ_KAFKA_CACHE:-$HOME/.cache/kbq}"
# keyed by the pom's content too, so a changed dependency list is fetched again
POM_HASH="$(sha256sum "$POM" | cut -c1-12)"
LIB_DIR="$CACHE_ROOT/kafka-$KAFKA_VERSION-$POM_HASH/lib"
START_TIMEOUT="${KBQ_KAFKA_START_TIMEOUT:-90}"
HEAP="${KBQ_KAFKA_HEAP:-512m}"
BROKER_SESSION_MS="${KBQ_KAFKA_BROKER_SESSION_MS:-2000}"

log() { echo "kafka.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# The jars are complete only when the marker exists: an interrupted copy is redone, not used.
cmd_fetch() {
    if [[ -f "$LIB_DIR/.complete" ]]; then
        return 0
    fi
    # several test binaries may start brokers at once: one fetch, the others wait for it
    mkdir -p "$CACHE_ROOT"
    exec 8>"$CACHE_ROOT/kafka-fetch.lock"
    flock 8
    if [[ -f "$LIB_DIR/.complete" ]]; then
        exec 8>&-
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (install maven)"
    command -v java >/dev/null || die "java not found (install a JDK 17+)"
    local tmp="$LIB_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    log "fetching kafka $KAFKA_VERSION jars into $LIB_DIR"
    if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.out" 2>&1; then
        cat "$tmp.out" >&2
        rm -rf "$tmp" "$tmp.out"
        die "maven could not fetch the kafka jars"
    fi
    rm -f "$tmp.out"
    touch "$tmp/.complete"
    rm -rf "$LIB_DIR"
    mv "$tmp" "$LIB_DIR"
    exec 8>&-
}

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
        return
    fi
    # Without python: a random high port that nothing accepts connections on.
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    die "no free loopback port found"
}

# True when PID is alive and is the broker started for DIR (a stale pid file whose number was
# reused by another process must never get a signal from us).
is_our_broker() {
    local pid="$1" dir="$2"
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "kafka.Kafka $dir/server.properties"
}

write_configs() {
    local dir="$1" bport="$2" cport="$3" sport="${4:-}"
    local listeners="PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport"
    local advertised="PLAINTEXT://127.0.0.1:$bport"
    local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if [[ -n "$sport" ]]; then
        listeners="$listeners,SASL_PLAINTEXT://127.0.0.1:$sport"
        advertised="$advertised,SASL_PLAINTEXT://127.0.0.1:$sport"
        protocols="$protocols,SASL_PLAINTEXT:SASL_PLAINTEXT"
    fi
    cat >"$dir/server.properties" <<EOF
# written by scripts/kafka.sh: one combined KRaft node for tests, loopback only
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
# tests create every topic they use, so a typo fails instead of auto-creating
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# lets tests use short session timeouts so that a killed consumer is noticed quickly
group.min.session.timeout.ms=1000
# the same for the KIP-848 protocol, whose timeouts are set on the broker
group.consumer.min.session.timeout.ms=1000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=500
# after a SIGKILL the restarted node waits for its own old registration to expire
broker.session.timeout.ms=$BROKER_SESSION_MS
broker.heartbeat.interval.ms=500
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
EOF
    if [[ -n "$sport" ]]; then
        # ACLs are enforced on every listener: the broker's own requests (PLAINTEXT and the
        # controller listener) come as User:ANONYMOUS, hence a super user; loopback only.
        cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_sink="sink-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
    fi
    cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/broker.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.controller.name = org.apache.kafka.controller
logger.controller.level = warn
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
EOF
}

java_opts() {
    local dir="$1"
    echo "-Xms128m -Xmx$HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true" \
        "-Dlog4j2.configurationFile=$dir/log4j2.properties"
}

# Starts the broker process for an already configured DIR and waits until it serves. Sets BROKER_PID.
launch() {
    local dir="$1"
    : >"$dir/broker.log"
    # Detached from our stdio: a caller reading our output (a test harness) gets EOF when this
    # script exits, not when the broker does.
    # shellcheck disable=SC2046
    java $(java_opts "$dir") -cp "$LIB_DIR/*" kafka.Kafka "$dir/server.properties" \
        </dev/null >"$dir/broker.out" 2>&1 &
    BROKER_PID=$!
    echo "$BROKER_PID" >"$dir/pid"
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$BROKER_PID" 2>/dev/null; then
            wait "$BROKER_PID" 2>/dev/null || true
            rm -f "$dir/pid"
            log "broker exited during startup; last lines of its output:"
            tail -n 30 "$dir/broker.out" "$dir/broker.log" >&2 || true
            return 1
        fi
        # The log line is written once the broker's listeners accept requests and the
        # controller has elected itself.
        if grep -q 'Kafka Server started' "$dir/broker.log" 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    log "broker did not start within ${START_TIMEOUT}s; last lines of its log:"
    tail -n 30 "$dir/broker.log" >&2 || true
    stop_pid "$BROKER_PID" "$dir" 1
    rm -f "$dir/pid"
    BROKER_PID=""
    return 2
}

stop_pid() {
    local pid="$1" dir="$2" hard="$3"
    is_our_broker "$pid" "$dir" || return 0
    if [[ "$hard" == 1 ]]; then
        kill -KILL "$pid" 2>/dev/null || true
    else
        kill -TERM "$pid" 2>/dev/null || true
    fi
    local deadline=$((SECONDS + 30))
    while is_our_broker "$pid" "$dir"; do
        if ((SECONDS >= deadline)); then
            log "broker $pid ignored SIGTERM for 30s, killing it"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 10))
        fi
        sleep 0.1
    done
}

start_watchdog() {
    local dir="$1" parent="$2" remove="$3" broker="$4"
    # setsid: a SIGINT/SIGHUP aimed at the caller's process group must not take the watchdog
    # down before it has stopped the broker.
    setsid bash -c '
        parent=$1 broker=$2 dir=$3 remove=$4 script=$5
        while kill -0 "$parent" 2>/dev/null; do
            sleep 0.5
            # stopped (or restarted) by someone else: a restart starts its own watchdog
            [[ "$(cat "$dir/pid" 2>/dev/null)" == "$broker" ]] || exit 0
        done
        "$script" stop "$dir" >/dev/null 2>&1 || true
        if [[ "$remove" == 1 ]]; then rm -rf -- "$dir"; fi
    ' kafka-watchdog "$parent" "$broker" "$dir" "$remove" "$SCRIPT_DIR/kafka.sh" \
        </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
}

cmd_start() {
    local dir="" parent="" remove=0 sasl=0
    while (($#)); do
        case "$1" in
            --parent) parent="$2"; shift 2 ;;
            --remove-dir) remove=1; shift ;;
            --sasl) sasl=1; shift ;;
            -*) die "unknown flag $1" ;;
            *) dir="$1"; shift ;;
        esac
    done
    [[ -n "$dir" ]] || die "usage: kafka.sh start DIR [--parent PID] [--remove-dir] [--sasl]"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [[ -f "$dir/pid" ]] && is_our_broker "$(cat "$dir/pid")" "$dir"; then
        die "a broker is already running for $dir (pid $(cat "$dir/pid"))"
    fi
    cmd_fetch

    # Until the broker is up and handed over, this script holds it: an interrupt kills it.
    BROKER_PID=""
    trap 'if [[ -n "$BROKER_PID" ]]; then stop_pid "$BROKER_PID" "$dir" 1; rm -f "$dir/pid"; fi' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    local bport cport sport="" attempt
    if [[ -f "$dir/ports" ]]; then
        # restart: same ports, same log dir, so clients reconnect to the address they know
        read -r bport cport sport <"$dir/ports"
        write_configs "$dir" "$bport" "$cport" "$sport"
        launch "$dir" || die "broker failed to restart on ports $bport/$cport"
    else
        # a base64url UUID, as `kafka-storage random-uuid` makes (without a second JVM); one
        # starting with `-` would read as a flag, so Kafka never generates those and neither do we
        local cluster_id="-"
        while [[ "$cluster_id" == -* ]]; do
            cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
        done
        for attempt in 1 2 3; do
            bport="$(free_port)"
            cport="$(free_port)"
            [[ "$bport" != "$cport" ]] || continue
            if ((sasl)); then
                sport="$(free_port)"
                [[ "$sport" != "$bport" && "$sport" != "$cport" ]] || continue
            fi
            rm -rf "$dir/data"
            write_configs "$dir" "$bport" "$cport" "$sport"
            java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LIB_DIR/*" \
                -Dlog4j2.configurationFile="$dir/log4j2.properties" \
                kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
                </dev/null >"$dir/format.out" 2>&1 || {
                cat "$dir/format.out" >&2
                die "formatting the log dir failed"
            }
            # another process may take a port between our probe and the broker's bind: that is
            # an early exit (1), worth another try; a broker that hangs (2) is not
            local rc=0
            launch "$dir" || rc=$?
            if ((rc == 0)); then
                echo "$bport $cport $sport" >"$dir/ports"
                break
            fi
            ((rc == 1 && attempt < 3)) || die "broker failed to start"
            log "retrying with other ports (attempt $attempt failed)"
        done
    fi
    echo "127.0.0.1:$bport" >"$dir/bootstrap"
    if [[ -n "$sport" ]]; then
        echo "127.0.0.1:$sport" >"$dir/sasl_bootstrap"
    fi
    if [[ -n "$parent" ]]; then
        echo "--parent $parent$([[ $remove == 1 ]] && echo ' --remove-dir')" >"$dir/watchdog.args"
        start_watchdog "$dir" "$parent" "$remove" "$BROKER_PID"
    fi
    BROKER_PID=""
    trap - EXIT INT TERM
    echo "127.0.0.1:$bport"
}

cmd_stop() {
    local dir="" hard=0
    while (($#)); do
        case "$1" in
            --hard) hard=1; shift ;;
            -*) die "unknown flag $1" ;;
            *) dir="$1"; shift ;;
        esac
    done
    [[ -n "$dir" && -d "$dir" ]] || die "usage: kafka.sh stop DIR [--hard]"
    dir="$(cd "$dir" && pwd)"
    [[ -f "$dir/pid" ]] || return 0
    stop_pid "$(cat "$dir/pid")" "$dir" "$hard"
    rm -f "$dir/pid"
}

cmd_restart() {
    local dir="$1"
    shift
    local -a watch=()
    cmd_stop "$dir" "$@"
    # keep the watchdog's parent across the restart
    if [[ -f "$dir/watchdog.args" ]]; then
        read -r -a watch <"$dir/watchdog.args"
    fi
    cmd_start "$dir" "${watch[@]}"
}

RUN_DIR=""
RUN_CHILD=""

cmd_run() {
    RUN_DIR="$1"
    shift
    [[ "${1:-}" == "--" ]] && shift
    (($#)) || die "usage: kafka.sh run DIR -- CMD..."
    mkdir -p "$RUN_DIR"
    RUN_DIR="$(cd "$RUN_DIR" && pwd)"
    # This script holds the broker for CMD's lifetime: however it ends, the broker stops.
    trap 'if [[ -n "$RUN_CHILD" ]]; then kill -TERM "$RUN_CHILD" 2>/dev/null || true; fi; cmd_stop "$RUN_DIR" >/dev/null 2>&1 || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    KBQ_KAFKA_BOOTSTRAP="$(cmd_start "$RUN_DIR" --parent $$)"
    export KBQ_KAFKA_BOOTSTRAP
    log "broker up at $KBQ_KAFKA_BOOTSTRAP"
    # In the background so that a signal to this script runs its trap at once (bash defers traps
    # while a foreground child runs).
    "$@" &
    RUN_CHILD=$!
    local rc=0
    wait "$RUN_CHILD" || rc=$?
    RUN_CHILD=""
    return "$rc"
}

main() {
    local sub="${1:-}"
    (($#)) && shift
    case "$sub" in
        fetch) cmd_fetch ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        restart) (($#)) || die "usage: kafka.sh restart DIR [--hard]"; cmd_restart "$@" ;;
        run) (($#)) || die "usage: kafka.sh run DIR -- CMD..."; cmd_run "$@" ;;
        *) die "usage: kafka.sh fetch | start DIR [--parent PID] [--remove-dir] [--sasl] | stop DIR [--hard] | restart DIR [--hard] | run DIR -- CMD..." ;;
    esac
}

main "$@"
