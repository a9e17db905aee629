#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace, with the real
# services the integration tests need (a Kafka broker, started here if not running).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

started_kafka=""
if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start
    started_kafka=1
fi
cleanup() {
    if [ -n "$started_kafka" ]; then scripts/kafka.sh stop || true; fi
}
trap cleanup EXIT

export KAFKA_BROKERS="127.0.0.1:${KAFKA_PORT:-9092}"
cargo test --workspace --locked
