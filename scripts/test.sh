#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace.
# Starts the services the integration tests need (none yet beyond the Rust toolchain).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
