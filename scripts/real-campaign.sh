#!/usr/bin/env bash
# One command for the real-server campaign: builds latmesh, starts the third-party servers
# of scripts/real-servers.sh on loopback (llama.cpp's llama-server, aimock, llmock; the first
# run builds llama-server, ~5 min on 2 cores), a coordinator and two agents (us-east, eu-west),
# runs examples/real-local.toml (or the campaign file given first: examples/real-context.toml
# runs long-context tiers against llama-server), prints the region × provider matrix, and
# stops everything it started. Extra arguments go to `latmesh campaign launch` (e.g. --json
# out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
campaign=examples/real-local.toml
if [ $# -gt 0 ] && [[ "$1" == *.toml ]]; then
	campaign=$1
	shift
fi

cargo build --bins --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/debug"
work=$(mktemp -d)
pids=()
servers_started=0
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [ "$servers_started" = 1 ]; then scripts/real-servers.sh stop >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

if ! scripts/real-servers.sh status >/dev/null 2>&1; then
	scripts/real-servers.sh start
	servers_started=1
fi

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/latmesh" serve --listen "127.0.0.1:$port" >"$work/coordinator.out" 2>"$work/coordinator.log" &
pids+=($!)
export LATMESH_REAL_LLMOCK_KEY="run-$$-$port" # llmock's quota is per key: a fresh one per run
for region in us-east eu-west; do
	"$bin/latmesh-agent" --coordinator "127.0.0.1:$port" --region "$region" --agent-id "$region-local" \
		--exit-after 1 2>"$work/agent-$region.log" &
	pids+=($!)
done
"$bin/latmesh" campaign launch "$campaign" --coordinator "127.0.0.1:$port" "$@"
