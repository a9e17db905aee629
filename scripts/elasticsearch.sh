#!/usr/bin/env bash
# Dev/CI search node with the Elasticsearch REST API on loopback.
#
#   scripts/elasticsearch.sh start | stop [--wipe] | status | restart | logs [-f] | wipe | build
#
# Runs a real one-node OpenSearch / Elasticsearch, embedded in a JVM with codelibs' runner
# libraries, all resolved from Maven Central by scripts/search/pom.xml. No Docker, no
# distribution tarballs. See docs/dev-services-search.md.
#
# Environment:
#   SEARCH_ENGINE       opensearch2 (default) | opensearch3 | elasticsearch7
#   ES_PORT             HTTP port on 127.0.0.1 (default 9200)
#   SEARCH_TRANSPORT_PORT  transport port or range (default 9300-9400)
#   SEARCH_CLUSTER_NAME cluster name (default eligibility-dev)
#   SEARCH_HEAP_OPTS    heap flags (default "-Xms512m -Xmx1g")
#   SEARCH_JAVA_OPTS    extra JVM flags appended last
#   SEARCH_JAVA_HOME    force a JDK (otherwise chosen per engine, see pick_java_home)
#   SEARCH_HOME_DIR     state dir: pid, lock, port, log, data (default .local/search;
#                       relative = project root). A second node needs its own, and its own ES_PORT.
#   SEARCH_START_TIMEOUT  seconds to wait for the node's first HTTP answer (default 120)
#   SEARCH_RECOVERY_TIMEOUT  seconds to wait, once it answers, for its shards to recover
#                       (green/yellow); 0 = as long as the node runs and recovers (default 0)
#   SEARCH_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 30)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM_DIR="$ROOT/scripts/search"
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$ROOT/$1" ;; esac; }
# Jars and compiled classes are shared by every home; the node's state is per home.
BUILD_DIR="$ROOT/.local/search"
HOME_DIR="$(abspath "${SEARCH_HOME_DIR:-.local/search}")"
PID_FILE="$HOME_DIR/node.pid"
ENGINE_FILE="$HOME_DIR/node.engine"
PORT_FILE="$HOME_DIR/node.port"
LOG_FILE="$HOME_DIR/node.log"
DATA_ROOT="$HOME_DIR/data"

DEFAULT_ENGINE=opensearch2
HOST=127.0.0.1
PORT="${ES_PORT:-9200}"
START_TIMEOUT="${SEARCH_START_TIMEOUT:-120}"
RECOVERY_TIMEOUT="${SEARCH_RECOVERY_TIMEOUT:-0}"
STOP_TIMEOUT="${SEARCH_STOP_TIMEOUT:-30}"

log() { printf '[elasticsearch.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

engine_from_env() {
  local e="${SEARCH_ENGINE:-$DEFAULT_ENGINE}"
  case "$e" in
    opensearch2|opensearch3|elasticsearch7) printf '%s' "$e" ;;
    *) die "SEARCH_ENGINE must be opensearch2, opensearch3 or elasticsearch7 (got '$e')" ;;
  esac
}

main_class() {
  case "$1" in
    elasticsearch7) printf 'dev.eligibility.search.ElasticsearchNode' ;;
    *) printf 'dev.eligibility.search.OpenSearchNode' ;;
  esac
}

# ---------------------------------------------------------------- java selection
# Major version of the java binary in $1/bin/java, or empty.
java_major() {
  local bin="$1/bin/java" v
  [[ -x "$bin" ]] || return 0
  v="$("$bin" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p' | head -1)"
  v="${v#1.}"
  printf '%s' "${v%%.*}"
}

# JDK homes to consider, in order of preference of origin.
java_candidates() {
  local d
  [[ -n "${JAVA_HOME:-}" ]] && printf '%s\n' "$JAVA_HOME"
  for d in /usr/lib/jvm/*; do [[ -d "$d" && ! -L "$d" ]] && printf '%s\n' "$d"; done
  if command -v java >/dev/null 2>&1; then
    d="$(readlink -f "$(command -v java)")"
    printf '%s\n' "${d%/bin/java}"
  fi
}

# opensearch2 / elasticsearch7: prefer Java 17 (then 21, then 11, then any newer one: both
#   were also seen to work embedded on JDK 25, which is outside their supported range).
# opensearch3: needs Java 21+ (first one found, e.g. the Temurin 25 JDK).
pick_java_home() {
  local engine="$1" c m best="" best_rank=99 rank
  if [[ -n "${SEARCH_JAVA_HOME:-}" ]]; then
    printf '%s' "$SEARCH_JAVA_HOME"; return
  fi
  while IFS= read -r c; do
    m="$(java_major "$c")"
    [[ -n "$m" ]] || continue
    case "$engine" in
      opensearch3) if (( m >= 21 )); then printf '%s' "$c"; return; fi ;;
      *)
        case "$m" in 17) rank=0 ;; 21) rank=1 ;; 11) rank=2 ;; *) rank=99; (( m > 11 )) && rank=3 ;; esac
        if (( rank < best_rank )); then best="$c"; best_rank=$rank; fi ;;
    esac
  done < <(java_candidates | awk '!seen[$0]++')
  [[ -n "$best" ]] || die "no suitable JDK for $engine (need $([[ $engine == opensearch3 ]] && echo '21+' || echo '11+, preferably 17')); set SEARCH_JAVA_HOME"
  printf '%s' "$best"
}

# ---------------------------------------------------------------- build / resolve
build_stamp() {
  local engine="$1"
  { printf '%s\n' "$engine"; cat "$POM_DIR/pom.xml"; find "$POM_DIR/src" -type f -name '*.java' | sort | xargs cat; } \
    | sha256sum | cut -d' ' -f1
}

ensure_built() {
  local engine="$1" java_home="$2"
  local libs="$BUILD_DIR/libs/$engine" classes="$BUILD_DIR/classes/$engine"
  local stamp_file="$BUILD_DIR/classes/$engine.stamp" stamp
  stamp="$(build_stamp "$engine")"
  built() {
    [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -d "$libs" && -d "$classes" ]] \
      && compgen -G "$libs/*.jar" >/dev/null
  }
  built && return 0
  # Every home shares the build, and the home's lock does not cover it: two nodes of two
  # homes starting at once must not both wipe and copy the same jars.
  mkdir -p "$BUILD_DIR"
  exec 8>"$BUILD_DIR/build-$engine.lock"
  if command -v flock >/dev/null 2>&1; then
    flock -w 600 8 || die "could not lock $BUILD_DIR/build-$engine.lock"
  fi
  if built; then
    exec 8>&-
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to resolve $engine from Maven Central)"
  log "resolving $engine runner from Maven Central and compiling the node main (first run only) ..."
  rm -rf "$libs" "$classes" "$stamp_file"
  local t0=$SECONDS build_log="$BUILD_DIR/build-$engine.log"
  if ! JAVA_HOME="$java_home" mvn -B -q -Dstyle.color=never -f "$POM_DIR/pom.xml" -P"$engine" \
        -Dsearch.home="$BUILD_DIR" process-classes >"$build_log" 2>&1; then
    tail -n 40 "$build_log" >&2
    die "maven build for $engine failed (full output: $build_log)"
  fi
  printf '%s\n' "$stamp" >"$stamp_file"
  exec 8>&-
  log "resolved $(find "$libs" -name '*.jar' | wc -l) jars ($(du -sh "$libs" | cut -f1)) in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- process helpers
running_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # guard against a recycled pid: must be our JVM for this checkout
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-Dsearch.basePath=$DATA_ROOT/" || return 1
  printf '%s' "$pid"
}

recorded() { if [[ -f "$1" ]]; then cat "$1"; fi; }

health_json() {
  curl -s --max-time 5 "http://$HOST:$1/_cluster/health" 2>/dev/null || true
}

health_status() {
  health_json "$1" | sed -n 's/.*"status" *: *"\([a-z]*\)".*/\1/p'
}

# ---------------------------------------------------------------- commands
cmd_build() {
  local engine java_home
  engine="$(engine_from_env)"
  java_home="$(pick_java_home "$engine")"
  ensure_built "$engine" "$java_home"
  log "$engine is built (java: $java_home)"
}

cmd_start() {
  local engine pid java_home t0=$SECONDS
  engine="$(engine_from_env)"
  if pid="$(running_pid)"; then
    local reng rport
    reng="$(recorded "$ENGINE_FILE")"; rport="$(recorded "$PORT_FILE")"
    if [[ "$reng" != "$engine" || "$rport" != "$PORT" ]]; then
      die "a search node is already running ($reng on port $rport, pid $pid); run '$0 stop' first"
    fi
    log "already running: $engine pid $pid on http://$HOST:$PORT"
    wait_healthy "$pid"
    return 0
  fi
  rm -f "$PID_FILE"
  if curl -s --max-time 2 -o /dev/null "http://$HOST:$PORT/" 2>/dev/null; then
    die "port $PORT on $HOST already answers HTTP but it is not this checkout's node; stop it or set ES_PORT"
  fi

  java_home="$(pick_java_home "$engine")"
  ensure_built "$engine" "$java_home"

  local base="$DATA_ROOT/$engine"
  mkdir -p "$base" "$HOME_DIR/tmp"
  local -a jvm_opts
  # shellcheck disable=SC2206
  jvm_opts=(${SEARCH_HEAP_OPTS:--Xms512m -Xmx1g})
  jvm_opts+=(
    -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow
    -Dfile.encoding=UTF-8 -Djava.awt.headless=true
    -Djava.io.tmpdir="$HOME_DIR/tmp"
    -Djna.nosys=true -Djna.tmpdir="$HOME_DIR/tmp"
    -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true -Dio.netty.recycler.maxCapacityPerThread=0
    -Dlog4j2.formatMsgNoLookups=true -Dlog4j.shutdownHookEnabled=false
    -Dsearch.basePath="$base/"
    -Dsearch.host="$HOST" -Dsearch.port="$PORT"
    -Dsearch.transportPort="${SEARCH_TRANSPORT_PORT:-9300-9400}"
    -Dsearch.clusterName="${SEARCH_CLUSTER_NAME:-eligibility-dev}"
  )
  if [[ "$engine" == opensearch3 ]]; then
    # as OpenSearch 3's own jvm.options: Lucene 10 uses the FFM API (no "restricted method"
    # warnings on JDK 22+) and the incubating Vector API
    jvm_opts+=(--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector)
  fi
  # shellcheck disable=SC2206
  [[ -n "${SEARCH_JAVA_OPTS:-}" ]] && jvm_opts+=(${SEARCH_JAVA_OPTS})

  printf '\n===== %s start %s (java %s) port %s =====\n' "$(date -u +%FT%TZ)" "$engine" "$java_home" "$PORT" >>"$LOG_FILE"
  cd "$HOME_DIR"
  nohup "$java_home/bin/java" "${jvm_opts[@]}" \
    -cp "$BUILD_DIR/classes/$engine:$BUILD_DIR/libs/$engine/*" "$(main_class "$engine")" \
    >>"$LOG_FILE" 2>&1 </dev/null 8>&- 9>&- &
  pid=$!
  cd - >/dev/null
  printf '%s\n' "$pid" >"$PID_FILE"
  printf '%s\n' "$engine" >"$ENGINE_FILE"
  printf '%s\n' "$PORT" >"$PORT_FILE"
  log "started $engine pid $pid (java $(java_major "$java_home")), waiting for http://$HOST:$PORT ..."
  wait_healthy "$pid"
  log "healthy after $((SECONDS - t0))s"
}

# Waits for green/yellow. SEARCH_START_TIMEOUT bounds the wait for a first HTTP answer; once
# the node answers it may still be recovering its shards (red), which takes as long as the
# data needs (a restart with a large index took 97 s): that wait is bounded only by
# SEARCH_RECOVERY_TIMEOUT, and it ends at once if the process exits.
wait_healthy() {
  local pid="$1" deadline=$((SECONDS + START_TIMEOUT)) st answered_at="" last_note=0
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 60 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      die "search node exited during startup (log: $LOG_FILE)"
    fi
    st="$(health_status "$PORT")"
    if [[ "$st" == green || "$st" == yellow ]]; then
      log "cluster health: $st (http://$HOST:$PORT)"
      return 0
    fi
    if [[ -n "$st" ]]; then
      if [[ -z "$answered_at" ]]; then
        answered_at=$SECONDS
        log "node answers (status $st); waiting for its shards to recover ..."
      fi
      if (( SECONDS - last_note >= 10 )); then
        last_note=$SECONDS
        log "recovering: $(health_json "$PORT" | sed -n 's/.*"active_shards_percent_as_number" *: *\([0-9.]*\).*/\1/p')% of shards active"
      fi
      if (( RECOVERY_TIMEOUT > 0 && SECONDS - answered_at >= RECOVERY_TIMEOUT )); then
        die "search node still $st after ${RECOVERY_TIMEOUT}s of recovery; still running as pid $pid, log: $LOG_FILE"
      fi
    elif [[ -z "$answered_at" ]] && (( SECONDS >= deadline )); then
      tail -n 60 "$LOG_FILE" >&2
      die "search node did not answer after ${START_TIMEOUT}s; still running as pid $pid, log: $LOG_FILE"
    fi
    sleep 0.5
  done
}

cmd_stop() {
  local wipe=0 pid
  for a in "$@"; do
    case "$a" in
      --wipe) wipe=1 ;;
      *) die "unknown option for stop: $a" ;;
    esac
  done
  if pid="$(running_pid)"; then
    log "stopping $(recorded "$ENGINE_FILE") pid $pid (SIGTERM)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
      if (( SECONDS >= deadline )); then
        log "still alive after ${STOP_TIMEOUT}s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        break
      fi
      sleep 0.2
    done
    log "stopped"
  else
    log "not running"
  fi
  rm -f "$PID_FILE"
  if (( wipe )); then
    rm -rf "$DATA_ROOT" "$HOME_DIR/tmp"
    log "wiped data ($DATA_ROOT); resolved jars kept"
  fi
}

cmd_status() {
  local pid port st
  if ! pid="$(running_pid)"; then
    echo "search node: not running"
    return 1
  fi
  port="$(recorded "$PORT_FILE")"; port="${port:-$PORT}"
  st="$(health_status "$port")"
  if [[ -z "$st" ]]; then
    echo "search node: $(recorded "$ENGINE_FILE") pid $pid on http://$HOST:$port, not answering yet"
    return 1
  fi
  echo "search node: $(recorded "$ENGINE_FILE") pid $pid on http://$HOST:$port, status $st"
  health_json "$port"
  echo
}

cmd_logs() {
  [[ -f "$LOG_FILE" ]] || die "no log yet ($LOG_FILE)"
  if [[ "${1:-}" == "-f" ]]; then
    exec tail -n 100 -F "$LOG_FILE"
  fi
  tail -n "${1:-200}" "$LOG_FILE"
}

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Serialise start/stop/wipe of this checkout's node (e.g. parallel test harnesses).
lock() {
  mkdir -p "$HOME_DIR"
  exec 9>"$HOME_DIR/node.lock"
  if command -v flock >/dev/null 2>&1; then
    flock -w "$((START_TIMEOUT + STOP_TIMEOUT + 60))" 9 || die "could not lock $HOME_DIR/node.lock"
  fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  start) lock; cmd_start ;;
  stop) lock; cmd_stop "$@" ;;
  wipe) lock; cmd_stop --wipe ;;
  restart) lock; cmd_stop; cmd_start ;;
  status) cmd_status ;;
  logs) cmd_logs "$@" ;;
  build) lock; cmd_build ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
