#!/usr/bin/env bash
# The source side of the Debezium pipeline test (tests/e2e/debezium_pipeline.rs, docs/cdc.md): a
# private PostgreSQL cluster with logical decoding, and a Kafka Connect worker
# (`ConnectStandalone`) running Debezium's PostgreSQL connector, both on loopback, each started
# and stopped by its process id. The worker's classpath also holds Apicurio Registry's
# AvroConverter, which a connector may name instead of the worker's JsonConverter.
#
#   scripts/debezium.sh fetch             download Kafka Connect and Debezium's jars once (Maven,
#                                         cached beside the broker's, scripts/kafka.sh)
#   scripts/debezium.sh postgres DIR [--parent PID]
#                                         initdb DIR/pg, start PostgreSQL on a free loopback port
#                                         (wal_level=logical), wait until it serves, print the
#                                         port. With --parent, a watchdog runs `stop DIR` once
#                                         PID has exited, however it exited.
#   scripts/debezium.sh connect DIR BOOTSTRAP CONNECTOR.properties...
#                                         start one Connect worker (JsonConverter for keys and
#                                         values, schemas enabled, offsets in DIR/connect) with
#                                         the connectors, wait until every connector streams
#   scripts/debezium.sh psql DIR [ARGS]   psql into DIR's cluster (stops at the first error)
#   scripts/debezium.sh stop DIR          stop the worker, then PostgreSQL, by the pids in DIR
#   scripts/debezium.sh installed         exit 0 when PostgreSQL's server binaries are here
#
# Environment: KBQ_KAFKA_CACHE (jar cache root, default $HOME/.cache/kbq),
# KBQ_DEBEZIUM_START_TIMEOUT (seconds, default 120), KBQ_CONNECT_HEAP (default 384m).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/debezium/pom.xml"
DEBEZIUM_VERSION="$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$POM")"
CACHE_ROOT="${KBQ_KAFKA_CACHE:-$HOME/.cache/kbq}"
POM_HASH="$(sha256sum "$POM" | cut -c1-12)"
LIB_DIR="$CACHE_ROOT/debezium-$DEBEZIUM_VERSION-$POM_HASH/lib"
START_TIMEOUT="${KBQ_DEBEZIUM_START_TIMEOUT:-120}"
HEAP="${KBQ_CONNECT_HEAP:-384m}"

log() { echo "debezium.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# The jars are complete only when the marker exists: an interrupted copy is redone, not used.
cmd_fetch() {
    [[ -f "$LIB_DIR/.complete" ]] && return 0
    mkdir -p "$CACHE_ROOT"
    exec 8>"$CACHE_ROOT/debezium-fetch.lock"
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
    log "fetching Kafka Connect and Debezium $DEBEZIUM_VERSION jars into $LIB_DIR"
    if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.out" 2>&1; then
        cat "$tmp.out" >&2
        rm -rf "$tmp" "$tmp.out"
        die "maven could not fetch the Connect and Debezium jars"
    fi
    rm -f "$tmp.out"
    touch "$tmp/.complete"
    rm -rf "$LIB_DIR"
    mv "$tmp" "$LIB_DIR"
    exec 8>&-
}

# Debian's server binaries (package postgresql): the newest major version installed.
pg_bin() {
    local bin
    bin="$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null |
        sort -V | tail -n 1)"
    [[ -n "$bin" ]] || return 1
    dirname "$bin"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# PostgreSQL refuses to run as root: the cluster belongs to the `postgres` user of Debian's
# package, or to `nobody` without it.
pg_user() {
    if [[ $(id -u) != 0 ]]; then
        id -un
    elif id postgres >/dev/null 2>&1; then
        echo postgres
    else
        echo nobody
    fi
}

# Runs a command as the cluster's owner (directly when that is us). `exec`: started in the
# background, the process whose pid `$!` gives is the command itself, not a subshell.
as_owner() {
    local user="$1"
    shift
    if [[ "$user" == "$(id -un)" ]]; then
        exec "$@"
    else
        exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- "$@"
    fi
}

# True when PID is alive and runs COMMAND for DIR (a reused pid never gets a signal from us).
is_ours() {
    local pid="$1" needle="$2"
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$needle"
}

stop_pid() {
    local pid="$1" needle="$2" what="$3" signal="${4:-TERM}"
    is_ours "$pid" "$needle" || return 0
    kill -"$signal" "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while is_ours "$pid" "$needle"; do
        if ((SECONDS >= deadline)); then
            log "$what $pid ignored SIG$signal for 30s, killing it"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 10))
        fi
        sleep 0.1
    done
}

start_watchdog() {
    local dir="$1" parent="$2"
    touch "$dir/watched"
    # setsid: a signal aimed at the caller's process group must not take the watchdog down
    # before it has stopped what it watches.
    setsid bash -c '
        parent=$1 dir=$2 script=$3
        while kill -0 "$parent" 2>/dev/null && [[ -e "$dir/watched" ]]; do sleep 0.5; done
        "$script" stop "$dir" >/dev/null 2>&1 || true
    ' debezium-watchdog "$parent" "$dir" "$SCRIPT_DIR/debezium.sh" </dev/null >/dev/null 2>&1 &
}

cmd_postgres() {
    local dir="" parent=""
    while (($#)); do
        case "$1" in
            --parent) parent="$2"; shift 2 ;;
            -*) die "unknown flag $1" ;;
            *) dir="$1"; shift ;;
        esac
    done
    [[ -n "$dir" ]] || die "usage: debezium.sh postgres DIR [--parent PID]"
    local bin
    bin="$(pg_bin)" || die "PostgreSQL's server is not installed (Debian: apt-get install postgresql; scripts/test.sh does)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    [[ -f "$dir/pg.pid" ]] && is_ours "$(cat "$dir/pg.pid")" "$dir/pg" &&
        die "PostgreSQL already runs for $dir"
    local user
    user="$(pg_user)"
    rm -rf "$dir/pg"
    mkdir -p "$dir/pg"
    chown "$user" "$dir/pg"
    chmod 700 "$dir/pg"
    # the owner must reach its data directory through the test's temp dir
    chmod o+x "$dir"
    (as_owner "$user" "$bin/initdb" -D "$dir/pg" -U postgres -A trust -E UTF8 --no-locale \
        </dev/null >"$dir/initdb.out" 2>&1) || {
        cat "$dir/initdb.out" >&2
        die "initdb failed"
    }
    [[ -n "$parent" ]] && start_watchdog "$dir" "$parent"
    local attempt port pid
    for attempt in 1 2 3; do
        port="$(free_port)"
        : >"$dir/postgres.log"
        chown "$user" "$dir/postgres.log"
        # the server itself, not pg_ctl: its pid is the one we stop. Loopback only, no socket
        # outside DIR; fsync off (a test cluster, thrown away).
        (as_owner "$user" "$bin/postgres" -D "$dir/pg" -p "$port" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories="$dir/pg" \
            -c wal_level=logical -c max_wal_senders=16 -c max_replication_slots=16 \
            -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
            -c shared_buffers=32MB -c timezone=UTC \
            </dev/null >>"$dir/postgres.log" 2>&1) &
        pid=$!
        echo "$pid" >"$dir/pg.pid"
        local deadline=$((SECONDS + 30))
        while ((SECONDS < deadline)); do
            kill -0 "$pid" 2>/dev/null || break
            if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
                echo "$port" >"$dir/pg.port"
                echo "$port"
                return 0
            fi
            sleep 0.1
        done
        stop_pid "$pid" "$dir/pg" postgres INT
        rm -f "$dir/pg.pid"
        log "PostgreSQL did not start on port $port (attempt $attempt); its log:"
        tail -n 20 "$dir/postgres.log" >&2
    done
    die "PostgreSQL failed to start"
}

cmd_connect() {
    (($# >= 3)) || die "usage: debezium.sh connect DIR BOOTSTRAP CONNECTOR.properties..."
    local dir="$1" bootstrap="$2"
    shift 2
    dir="$(cd "$dir" && pwd)"
    cmd_fetch
    mkdir -p "$dir/connect"
    local port
    port="$(free_port)"
    cat >"$dir/connect/worker.properties" <<EOF
# written by scripts/debezium.sh: one standalone worker, loopback only
bootstrap.servers=$bootstrap
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
offset.storage.file.filename=$dir/connect/offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$port
rest.advertised.host.name=127.0.0.1
EOF
    cat >"$dir/connect/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/connect/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
logger.runtime.name = org.apache.kafka.connect.runtime
logger.runtime.level = info
EOF
    : >"$dir/connect/connect.log"
    # shellcheck disable=SC2086
    java -Xms64m -Xmx"$HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
        -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/connect/log4j2.properties" \
        -cp "$LIB_DIR/*" org.apache.kafka.connect.cli.ConnectStandalone \
        "$dir/connect/worker.properties" "$@" </dev/null >"$dir/connect/connect.out" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/connect.pid"
    local want=$#
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$dir/connect.pid"
            log "the Connect worker exited during startup; its output:"
            tail -n 40 "$dir/connect/connect.out" "$dir/connect/connect.log" >&2 || true
            die "Kafka Connect failed"
        fi
        # one line per connector once its task has begun streaming from its slot
        local streaming
        streaming="$(grep -c 'Starting streaming' "$dir/connect/connect.log" 2>/dev/null || true)"
        if ((streaming >= want)); then
            echo "$port"
            return 0
        fi
        if grep -q 'ERROR' "$dir/connect/connect.log"; then
            log "the Connect worker logged an error:"
            grep -A 20 -m 3 'ERROR' "$dir/connect/connect.log" >&2 || true
            stop_pid "$pid" "$dir/connect/worker.properties" "Kafka Connect"
            rm -f "$dir/connect.pid"
            die "a connector failed"
        fi
        sleep 0.2
    done
    log "the connectors did not stream within ${START_TIMEOUT}s; the log's tail:"
    tail -n 40 "$dir/connect/connect.log" >&2 || true
    stop_pid "$pid" "$dir/connect/worker.properties" "Kafka Connect"
    rm -f "$dir/connect.pid"
    die "Kafka Connect did not start"
}

cmd_stop() {
    local dir="${1:-}"
    [[ -n "$dir" && -d "$dir" ]] || die "usage: debezium.sh stop DIR"
    dir="$(cd "$dir" && pwd)"
    rm -f "$dir/watched"
    if [[ -f "$dir/connect.pid" ]]; then
        stop_pid "$(cat "$dir/connect.pid")" "$dir/connect/worker.properties" "Kafka Connect"
        rm -f "$dir/connect.pid"
    fi
    if [[ -f "$dir/pg.pid" ]]; then
        # SIGINT: PostgreSQL's fast shutdown, which ends open sessions (SIGTERM would wait for
        # every client to leave)
        stop_pid "$(cat "$dir/pg.pid")" "$dir/pg" postgres INT
        rm -f "$dir/pg.pid"
    fi
}

cmd_psql() {
    (($#)) || die "usage: debezium.sh psql DIR [ARGS]"
    local dir="$1" bin
    shift
    bin="$(pg_bin)" || die "PostgreSQL is not installed"
    exec "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(cat "$dir/pg.port")" \
        -U postgres -d postgres "$@"
}

main() {
    local sub="${1:-}"
    (($#)) && shift
    case "$sub" in
        fetch) cmd_fetch ;;
        postgres) cmd_postgres "$@" ;;
        connect) cmd_connect "$@" ;;
        stop) cmd_stop "$@" ;;
        psql) cmd_psql "$@" ;;
        installed) pg_bin >/dev/null ;;
        *) die "usage: debezium.sh fetch | postgres DIR [--parent PID] | connect DIR BOOTSTRAP CONNECTOR.properties... | psql DIR [ARGS] | stop DIR | installed" ;;
    esac
}

main "$@"
