#!/usr/bin/env bash
# The test command (README): builds every binary, installs and starts on loopback what the
# tests need (a real ClickHouse, Debian's 18.16 server; the third-party OpenAI-compatible
# servers of scripts/real-servers.sh: llama.cpp's
# llama-server, aimock, llmock; the first install builds llama-server, ~5 min on 2 cores, then
# it is cached), runs the whole test suite under cargo-nextest (.config/nextest.toml), stops
# what it started, and ends with one line "N passed, N failed" totalled over every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Disk: the test build takes ~2.5 GB (3.5 GB with incremental caches), ClickHouse, Chromium and
# the llama.cpp build ~2 GB more. Say so up front rather than fail mid-compile.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_kb=$(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }')
echo "== disk: $((free_kb / 1024 / 1024)) GB free under $target_dir"
if [ "$free_kb" -lt $((6 * 1024 * 1024)) ]; then
	echo "warning: a full test run needs about 6 GB of free disk; the build may fail with 'No space left on device'" >&2
fi

echo "== building binaries"
cargo build --workspace --bins --locked

echo "== lints (the root Cargo.toml's [workspace.lints]: missing_docs, clippy): a warning fails the run"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== deployment checks (scripts/deploy-checks.sh: Terraform, cloud-init, systemd units, container files)"
scripts/deploy-checks.sh

echo "== Chromium for the report test (Debian's chromium, installed if missing)"
if ! command -v chromium >/dev/null; then
	sudo_cmd=""
	[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
	$sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi

echo "== starting ClickHouse (scripts/clickhouse.sh: Debian's clickhouse-server, installed if missing)"
state_dir=$(mktemp -d)
ch_dir=$(mktemp -d)
log=$(mktemp)
cleanup() {
	scripts/real-servers.sh stop --state-dir "$state_dir" >/dev/null 2>&1 || true
	scripts/clickhouse.sh stop --state-dir "$ch_dir" >/dev/null 2>&1 || true
	rm -rf "$state_dir" "$ch_dir" "$log"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
LATMESH_CLICKHOUSE_HTTP_PORT=$(free_port) LATMESH_CLICKHOUSE_TCP_PORT=$(free_port) \
	scripts/clickhouse.sh start --state-dir "$ch_dir" >"$ch_dir.url"
LATMESH_CLICKHOUSE_URL=$(tail -n 1 "$ch_dir.url")
rm -f "$ch_dir.url"
export LATMESH_CLICKHOUSE_URL
echo "ClickHouse at $LATMESH_CLICKHOUSE_URL"

echo "== starting the real third-party servers (scripts/real-servers.sh)"
if scripts/real-servers.sh status >/dev/null 2>&1; then
	echo "already running (default state dir): the tests use those"
else
	scripts/real-servers.sh start --state-dir "$state_dir"
	export LATMESH_REAL_STATE_DIR="$state_dir"
fi

echo "== load benchmark, smoke mode (scripts/bench-load.sh --smoke: it must not rot)"
scripts/bench-load.sh --smoke

echo "== running tests (cargo-nextest, .config/nextest.toml; then the doctests)"
# Agents started by the tests without --spool-dir keep their default spool under
# $XDG_STATE_HOME: a throwaway directory of this run, not the user's ~/.local/state.
export XDG_STATE_HOME="$state_dir/xdg-state"
set +e
# One process per test; the ClickHouse-bound and serial tests are capped by test groups.
cargo nextest run --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# nextest does not run doctests.
cargo test --workspace --locked --doc 2>&1 | tee -a "$log"
doc_status=${PIPESTATUS[0]}
set -e
[ "$status" -ne 0 ] || status=$doc_status
# Totals: nextest's summary line ("Summary [ 912.3s] 700 tests run: 698 passed (3 slow),
# 2 failed, 1 skipped"; a timed-out test counts as failed) and the doctests' "test result:" lines.
awk '/^ *Summary \[/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed,?$/) p += $(i-1); if ($(i) ~ /^(failed|timed)/ && $(i-1) ~ /^[0-9]+$/) f += $(i-1) } }
     /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
