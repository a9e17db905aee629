#!/usr/bin/env bash
# The whole test suite: formatting, lints, the import graph, the Kubernetes manifests, and every test of the
# workspace, with the real
# services the integration tests need: a Kafka broker and a search node (OpenSearch 2 by
# default), started here if not running. The Elasticsearch sink's tests then run a second
# time against Elasticsearch 7.10 (set ELIGIBILITY_SKIP_ES7=1 to skip that pass).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The layering of src/: no import circle, no import running up a floor (docs/architecture.md);
# and no import circle in bench/.
python3 scripts/import_graph.py
python3 scripts/import_graph.py bench

# The Kubernetes manifests: rendered with kustomize, checked with kubeconform against
# schemas built offline (cached under .local/k8s; a cold run takes a few minutes).
scripts/k8s-validate.sh

# The alerts and recording rules (deploy/prometheus), checked and unit-tested by Prometheus's
# own promtool (Debian package prometheus); tests/prometheus*.rs test the rest of the
# monitoring against the job and a real Prometheus server.
promtool check rules deploy/prometheus/eligibility.rules.yml
promtool test rules deploy/prometheus/eligibility.rules.test.yml

# The container image (Containerfile): built with buildah and run (scripts/image.sh smoke:
# the demo and a file-mode run inside it, its contents checked), where this machine can
# build it (root, buildah installed or installable). A release build of the binary when
# target/release is not up to date; about a minute more when it is.
if [ "${ELIGIBILITY_SKIP_IMAGE:-}" = 1 ]; then
    echo "SKIP: container image build and smoke (ELIGIBILITY_SKIP_IMAGE=1)"
elif reason="$(scripts/image.sh available)"; then
    scripts/image.sh build
    scripts/image.sh smoke
else
    echo "SKIP: container image build and smoke: $reason"
fi

started=()
cleanup() {
    for service in "${started[@]}"; do "scripts/$service.sh" stop >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
for service in kafka elasticsearch; do
    if ! "scripts/$service.sh" status >/dev/null 2>&1; then
        "scripts/$service.sh" start
        started+=("$service")
    fi
done

export KAFKA_BROKERS="127.0.0.1:${KAFKA_PORT:-9092}"
export ELIGIBILITY_SEARCH_URL="http://127.0.0.1:${ES_PORT:-9200}"
cargo test --workspace --locked

if [ "${ELIGIBILITY_SKIP_ES7:-}" != 1 ]; then
    echo "== the Elasticsearch sink against Elasticsearch 7.10"
    scripts/elasticsearch.sh stop >/dev/null
    export SEARCH_ENGINE=elasticsearch7
    scripts/elasticsearch.sh start
    cargo test --locked --test elasticsearch
    scripts/elasticsearch.sh stop >/dev/null
    unset SEARCH_ENGINE
    # Leave the default node as it was found.
    if [[ ! " ${started[*]} " =~ " elasticsearch " ]]; then scripts/elasticsearch.sh start >/dev/null; fi
fi
