#!/usr/bin/env bash
# Heavy check, by hand (minutes; not part of scripts/test.sh): a node killed with SIGKILL
# while its translog holds a lot comes back green with `scripts/elasticsearch.sh start`.
#
#   scripts/search/check-recovery.sh [DOCS]      (default 5000000 pair documents)
#
# Runs a node of its own (own home and ports, beside the default one), indexes DOCS pair
# documents into an index that never flushes (so they all stay in the translog), kills the
# node with SIGKILL, starts it again and times the recovery. Passes when `start` returns,
# the cluster is green and every document is there. The recovery must outlast the runner's
# 30 s ensureYellow() to show the launcher waits (the node closed itself there before);
# the script says how long it took. See docs/dev-services-search.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DOCS="${1:-5000000}"
HOME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/search-recovery.XXXXXX")"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
export SEARCH_HOME_DIR="$HOME_DIR" ES_PORT="$PORT" SEARCH_TRANSPORT_PORT="$(free_port)"
URL="http://127.0.0.1:$PORT"
INDEX=recovery-check
script() { "$ROOT/scripts/elasticsearch.sh" "$@"; }
log() { printf '[check-recovery] %s\n' "$*" >&2; }
# What the node said of its recovery: the evidence, whether the check passes or fails.
cleanup() {
  local status=$?
  grep -E 'ensureYellow timed out|failed to start|recovering:|READY|shutdown requested' "$HOME_DIR/node.log" 2>/dev/null \
    | cut -c1-240 | tail -n 8 >&2 || true
  script stop >/dev/null 2>&1 || true
  rm -rf "$HOME_DIR"
  exit "$status"
}
trap cleanup EXIT

script start
curl -sf -XPUT "$URL/$INDEX" -H 'Content-Type: application/json' -d '{
  "settings": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": -1,
               "index.translog.flush_threshold_size": "10gb"},
  "mappings": {"dynamic": "strict", "properties": {
    "campaign_id": {"type": "keyword"}, "seller_id": {"type": "keyword"},
    "eligible_products": {"type": "long"}, "eligible_stock": {"type": "long"}}}}' >/dev/null

log "indexing $DOCS pair documents ..."
t0=$SECONDS
python3 - "$PORT" "$INDEX" "$DOCS" <<'PY'
import http.client, json, sys
port, index, docs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
batch = 5000
for start in range(0, docs, batch):
    lines = []
    for n in range(start, min(start + batch, docs)):
        campaign, seller = f"c-{n % 997}", n // 997
        lines.append(json.dumps({"index": {"_id": f"{campaign}:{seller}"}}))
        lines.append(json.dumps({"campaign_id": campaign, "seller_id": seller,
                                 "eligible_products": n % 50 + 1, "eligible_stock": n % 5000}))
    connection.request("POST", f"/{index}/_bulk", "\n".join(lines) + "\n",
                       {"Content-Type": "application/x-ndjson"})
    answer = json.loads(connection.getresponse().read())
    if answer.get("errors"):
        sys.exit(f"bulk errors: {json.dumps(answer)[:500]}")
PY
translog="$(curl -sf "$URL/$INDEX/_stats/translog" | python3 -c 'import json,sys; t=json.load(sys.stdin)["_all"]["primaries"]["translog"]; print(t["operations"], t["size_in_bytes"] // 2**20)')"
log "indexed in $((SECONDS - t0))s; translog: ${translog% *} operations, ${translog#* } MiB"

pid="$(cat "$HOME_DIR/node.pid")"
log "SIGKILL to the node (pid $pid)"
kill -KILL "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done

t0=$SECONDS
script start
took=$((SECONDS - t0))
health="$(curl -sf "$URL/_cluster/health")"
count="$(curl -sf -XPOST "$URL/$INDEX/_refresh" >/dev/null && curl -sf "$URL/$INDEX/_count" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')"
grep -o '"status":"[a-z]*"' <<<"$health" | grep -q green || { log "FAIL: not green: $health"; exit 1; }
[[ "$count" == "$DOCS" ]] || { log "FAIL: $count documents after the recovery, $DOCS indexed"; exit 1; }
log "PASS: back green in ${took}s with all $count documents$( ((took > 30)) || echo ' (recovery under 30 s: raise DOCS to outlast ensureYellow)')"
