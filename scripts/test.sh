#!/usr/bin/env bash
# The test command (README): builds every binary, installs and starts what the tests need
# on loopback, runs the whole test suite, stops what it started, and ends with one line
# "N passed, N failed" totalled over every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building binaries"
cargo build --workspace --bins --locked

echo "== running tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked -- --test-threads=2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
