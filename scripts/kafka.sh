#!/usr/bin/env bash
# Dev/CI Apache Kafka broker: a single KRaft node (broker + controller) on loopback,
# run from the official Apache Kafka jars on Maven Central (resolved with mvn through
# scripts/kafka/pom.xml). No Docker, no tarball. See docs/dev-services-kafka.md.
#
#   scripts/kafka.sh start              resolve jars (cached), format storage once, start, wait until it answers
#   scripts/kafka.sh stop [--wipe]      SIGTERM, then SIGKILL after a timeout; --wipe also deletes the data
#   scripts/kafka.sh restart            stop + start (data kept)
#   scripts/kafka.sh status             exit 0 and print "running" when the broker answers, exit 1 otherwise
#   scripts/kafka.sh logs [-f]          tail the broker log
#   scripts/kafka.sh wipe               stop and delete the data dir (jars kept)
#   scripts/kafka.sh resolve            only resolve the jars into the cache
#   scripts/kafka.sh bootstrap          print the bootstrap address (127.0.0.1:PORT)
#   scripts/kafka.sh topics             list topics
#   scripts/kafka.sh create-topic NAME [PARTITIONS] [--compact] [--config k=v ...]   (idempotent)
#   scripts/kafka.sh delete-topic NAME
#   scripts/kafka.sh describe-topic [NAME]
#   scripts/kafka.sh produce TOPIC      stdin lines "key<TAB>value"; value NULL = tombstone
#   scripts/kafka.sh consume TOPIC [MAX_MESSAGES] [TIMEOUT_MS]   prints "key<TAB>value" from the beginning
#   scripts/kafka.sh tool MAIN_CLASS ARGS...   any Kafka main class with the broker classpath
#
# Environment:
#   KAFKA_PORT             PLAINTEXT listener port on 127.0.0.1 (default 9092)
#   KAFKA_CONTROLLER_PORT  CONTROLLER listener port on 127.0.0.1 (default 9093)
#   KAFKA_HOME_DIR         state dir: config, data, logs, pid (default .local/kafka; relative = project root)
#   KAFKA_LIBS_DIR         jar cache (default .local/kafka/libs under the project root)
#   KAFKA_HEAP_OPTS        broker heap (default "-Xms256m -Xmx512m")
#   KAFKA_START_TIMEOUT    seconds to wait for the broker to answer (default 60)
#   KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL (default 30)
#   JAVA, MVN              java / mvn executables (default: from PATH)
#   KAFKA_MVN_ARGS         extra mvn flags for the jar resolution (e.g. "-s settings.xml" or "-o")
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"

abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$ROOT/$1" ;; esac; }

KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HOME_DIR="$(abspath "${KAFKA_HOME_DIR:-.local/kafka}")"
KAFKA_LIBS_DIR="$(abspath "${KAFKA_LIBS_DIR:-.local/kafka/libs}")"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

HOST=127.0.0.1
BOOTSTRAP="$HOST:$KAFKA_PORT"
CONF_DIR="$KAFKA_HOME_DIR/config"
DATA_DIR="$KAFKA_HOME_DIR/data"
LOG_DIR="$KAFKA_HOME_DIR/logs"
PID_FILE="$KAFKA_HOME_DIR/kafka.pid"
CLUSTER_ID_FILE="$KAFKA_HOME_DIR/cluster.id"
SERVER_PROPS="$CONF_DIR/server.properties"
BROKER_LOG4J="$CONF_DIR/log4j2.properties"
TOOLS_LOG4J="$CONF_DIR/tools-log4j2.properties"
STAMP="$KAFKA_LIBS_DIR/.resolved"

# Main classes (Kafka 4.x)
MAIN_BROKER=kafka.Kafka
MAIN_STORAGE=kafka.tools.StorageTool
MAIN_TOPICS=org.apache.kafka.tools.TopicCommand
MAIN_PRODUCER=org.apache.kafka.tools.ConsoleProducer
MAIN_CONSUMER=org.apache.kafka.tools.consumer.ConsoleConsumer

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- jars

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

resolve() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" ]]; then
    return 0
  fi
  command -v "$MVN" >/dev/null || die "mvn not found (need Maven 3.8+)"
  log "resolving Kafka jars from Maven Central into $KAFKA_LIBS_DIR (first time only)..."
  local tmp="$KAFKA_LIBS_DIR.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$KAFKA_LIBS_DIR")"
  local t0=$SECONDS
  # shellcheck disable=SC2086  # KAFKA_MVN_ARGS is a list of flags
  if ! "$MVN" -B -q ${KAFKA_MVN_ARGS:-} -f "$POM" dependency:copy-dependencies -Dkafka.libs.dir="$tmp" >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    die "mvn dependency:copy-dependencies failed"
  fi
  rm -f "$tmp.log"
  ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "resolution produced no kafka_2.13 jar in $tmp"
  pom_hash >"$tmp/.resolved"
  rm -rf "$KAFKA_LIBS_DIR"
  mv "$tmp" "$KAFKA_LIBS_DIR"
  local jars=("$KAFKA_LIBS_DIR"/*.jar)
  log "resolved ${#jars[@]} jars in $((SECONDS - t0))s"
}

kafka_version() {
  local jars=("$KAFKA_LIBS_DIR"/kafka_2.13-*.jar)
  local j="${jars[0]##*/kafka_2.13-}"
  printf '%s\n' "${j%.jar}"
}

# ---------------------------------------------------------------- config

write_configs() {
  mkdir -p "$CONF_DIR" "$DATA_DIR" "$LOG_DIR"
  # Regenerated on every start, so port changes take effect; the data is kept.
  cat >"$SERVER_PROPS" <<EOF
# Generated by scripts/kafka.sh on each start: edits here are overwritten.
# Single-node KRaft (combined broker + controller) for development and CI.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT

log.dirs=$DATA_DIR
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.cleaner.enable=true
# After an unclean kill the controller waits for the old broker session to expire
# before it accepts the restarted broker (default 9 s); keep that short on loopback.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF

  cat >"$BROKER_LOG4J" <<EOF
# Generated by scripts/kafka.sh. Broker logs go to files only.
status = warn
appender.server.type = RollingFile
appender.server.name = server
appender.server.fileName = $LOG_DIR/server.log
appender.server.filePattern = $LOG_DIR/server.log.%i
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 50MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 3

appender.state.type = File
appender.state.name = state
appender.state.fileName = $LOG_DIR/state-change.log
appender.state.layout.type = PatternLayout
appender.state.layout.pattern = [%d] %p %m (%c)%n

rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server

logger.state.name = state.change.logger
logger.state.level = INFO
logger.state.additivity = false
logger.state.appenderRef.state.ref = state

logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.netclient.name = org.apache.kafka.clients.NetworkClient
logger.netclient.level = WARN
EOF

  cat >"$TOOLS_LOG4J" <<EOF
# Generated by scripts/kafka.sh. CLI tools: warnings and errors to stderr.
status = warn
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
EOF
}

cluster_id() {
  if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
    run_tool "$MAIN_STORAGE" random-uuid >"$CLUSTER_ID_FILE.tmp"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  tr -d '[:space:]' <"$CLUSTER_ID_FILE"
}

format_storage() {
  [[ -f "$DATA_DIR/meta.properties" ]] && return 0
  local cid
  cid="$(cluster_id)"
  log "formatting storage in $DATA_DIR (cluster id $cid)"
  run_tool "$MAIN_STORAGE" format --config "$SERVER_PROPS" --cluster-id "$cid" --ignore-formatted >&2
}

# ---------------------------------------------------------------- process

run_tool() {
  local main="$1"; shift
  "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$TOOLS_LOG4J" \
    -cp "$KAFKA_LIBS_DIR/*" "$main" "$@"
}

pid_alive() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled pid: it must be our broker.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$MAIN_BROKER $SERVER_PROPS" || return 1
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# A real metadata round trip through the AdminClient.
broker_answers() {
  timeout 30 "$JAVA" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$TOOLS_LOG4J" -Dlog4j2.level=OFF \
    -cp "$KAFKA_LIBS_DIR/*" "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --list \
    >/dev/null 2>&1
}

start() {
  if pid_alive; then
    log "already running (pid $(cat "$PID_FILE")) on $BOOTSTRAP; nothing to do"
    return 0
  fi
  rm -f "$PID_FILE"
  command -v "$JAVA" >/dev/null || die "java not found (need Java 17+)"
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    port_open "$p" && die "port $HOST:$p is already in use by another process"
  done
  local t0=$SECONDS
  resolve
  write_configs
  format_storage

  local gc_log="$LOG_DIR/gc.log"
  # shellcheck disable=SC2086  # KAFKA_HEAP_OPTS is a list of flags
  nohup "$JAVA" $KAFKA_HEAP_OPTS \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError \
    "-Xlog:gc*:file=$gc_log:time,tags:filecount=2,filesize=10M" \
    -Djava.awt.headless=true \
    -Dkafka.logs.dir="$LOG_DIR" \
    -Dlog4j2.configurationFile="$BROKER_LOG4J" \
    -cp "$KAFKA_LIBS_DIR/*" \
    "$MAIN_BROKER" "$SERVER_PROPS" \
    </dev/null >"$LOG_DIR/stdout.log" 2>&1 9>&- &
  local pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "broker exited during startup; last log lines:"
      tail -n 40 "$LOG_DIR/server.log" "$LOG_DIR/stdout.log" >&2 2>/dev/null || true
      rm -f "$PID_FILE"
      exit 1
    fi
    if port_open "$KAFKA_PORT" && broker_answers; then
      break
    fi
    if ((SECONDS >= deadline)); then
      log "broker did not answer on $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s; stopping it. Last log lines:"
      tail -n 40 "$LOG_DIR/server.log" >&2 2>/dev/null || true
      stop >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.5
  done
  log "Kafka $(kafka_version) running (pid $pid) on $BOOTSTRAP, controller $HOST:$KAFKA_CONTROLLER_PORT; ready in $((SECONDS - t0))s"
  log "logs: $LOG_DIR/server.log  (scripts/kafka.sh logs -f); data: $DATA_DIR"
}

stop() {
  if ! pid_alive; then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  local pid
  pid="$(cat "$PID_FILE")"
  log "stopping broker (pid $pid)..."
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still alive after ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  rm -f "$PID_FILE"
  log "stopped"
}

wipe() {
  stop
  rm -rf "$DATA_DIR" "$CLUSTER_ID_FILE"
  log "wiped $DATA_DIR"
}

status() {
  if pid_alive && port_open "$KAFKA_PORT"; then
    echo "running (pid $(cat "$PID_FILE"), $BOOTSTRAP)"
    return 0
  fi
  echo "not running"
  return 1
}

need_running() { pid_alive || port_open "$KAFKA_PORT" || die "broker not running on $BOOTSTRAP (scripts/kafka.sh start)"; }
need_libs() { [[ -f "$STAMP" ]] || resolve; [[ -f "$TOOLS_LOG4J" ]] || write_configs; }

# ---------------------------------------------------------------- main

# Serialize start/stop/restart/wipe of one KAFKA_HOME_DIR (parallel test runners may
# all call start). The broker itself does not inherit the lock fd (see 9>&- above).
lock() {
  mkdir -p "$KAFKA_HOME_DIR"
  exec 9>"$KAFKA_HOME_DIR/.lock"
  if command -v flock >/dev/null; then
    flock -w 120 9 || die "could not lock $KAFKA_HOME_DIR/.lock within 120s"
  fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in start|stop|restart|wipe) lock ;; esac
case "$cmd" in
  start) start ;;
  stop)
    if [[ "${1:-}" == "--wipe" ]]; then wipe; else stop; fi ;;
  restart) stop; start ;;
  status) status ;;
  wipe) wipe ;;
  resolve) resolve; log "jars in $KAFKA_LIBS_DIR (Kafka $(kafka_version))" ;;
  bootstrap) echo "$BOOTSTRAP" ;;
  logs)
    [[ -f "$LOG_DIR/server.log" ]] || die "no log yet at $LOG_DIR/server.log"
    if [[ "${1:-}" == "-f" ]]; then tail -n 100 -F "$LOG_DIR/server.log"; else tail -n 200 "$LOG_DIR/server.log"; fi ;;
  topics)
    need_libs; need_running
    run_tool "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --list ;;
  create-topic)
    [[ $# -ge 1 ]] || die "usage: create-topic NAME [PARTITIONS] [--compact] [--config k=v ...]"
    name="$1"; shift
    partitions=1
    if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then partitions="$1"; shift; fi
    extra=()
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --compact) extra+=(--config cleanup.policy=compact) ;;
        *) extra+=("$1") ;;
      esac
      shift
    done
    need_libs; need_running
    run_tool "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --create --if-not-exists \
      --topic "$name" --partitions "$partitions" --replication-factor 1 ${extra[@]+"${extra[@]}"} ;;
  delete-topic)
    [[ $# -ge 1 ]] || die "usage: delete-topic NAME"
    need_libs; need_running
    run_tool "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --delete --if-exists --topic "$1" ;;
  describe-topic)
    need_libs; need_running
    if [[ $# -ge 1 ]]; then
      run_tool "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --describe --topic "$1"
    else
      run_tool "$MAIN_TOPICS" --bootstrap-server "$BOOTSTRAP" --describe
    fi ;;
  produce)
    [[ $# -ge 1 ]] || die "usage: produce TOPIC  (stdin: key<TAB>value per line, value NULL = tombstone)"
    need_libs; need_running
    run_tool "$MAIN_PRODUCER" --bootstrap-server "$BOOTSTRAP" --topic "$1" \
      --command-property acks=all \
      --reader-property parse.key=true --reader-property "key.separator=	" \
      --reader-property null.marker=NULL ;;
  consume)
    [[ $# -ge 1 ]] || die "usage: consume TOPIC [MAX_MESSAGES] [TIMEOUT_MS]"
    need_libs; need_running
    args=(--bootstrap-server "$BOOTSTRAP" --topic "$1" --from-beginning
          --formatter-property print.key=true --formatter-property "key.separator=	"
          --formatter-property null.literal=NULL
          --command-property group.protocol=consumer
          --timeout-ms "${3:-10000}")
    [[ -n "${2:-}" ]] && args+=(--max-messages "$2")
    run_tool "$MAIN_CONSUMER" "${args[@]}" ;;
  tool)
    [[ $# -ge 1 ]] || die "usage: tool MAIN_CLASS ARGS..."
    need_libs
    run_tool "$@" ;;
  ""|-h|--help|help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (try: start, stop, status, restart, logs, wipe, topics, create-topic, produce, consume, tool)" ;;
esac
