#!/usr/bin/env bash
# Stops the local stack that deploy/local/start.sh started from DIR: the agents, the coordinator
# and the simulator by their pid files in DIR/pids (SIGTERM — SIGINT first for the coordinator,
# its graceful shutdown —, SIGKILL after a grace), then ClickHouse with scripts/clickhouse.sh.
# A pid file whose process is gone or was replaced (another start time) is just removed.
# Idempotent: stopping a stopped stack (or a folder that does not exist) succeeds. Logs, data
# and state stay in DIR.
#
# Usage: deploy/local/stop.sh [--dir DIR]   (default <repo>/.latmesh/local, or LATMESH_LOCAL_DIR)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
# shellcheck source=deploy/local/common.sh
. "$SCRIPT_DIR/common.sh"

DIR="${LATMESH_LOCAL_DIR:-$REPO_ROOT/.latmesh/local}"
GRACE_S=10

while [ $# -gt 0 ]; do
	case "$1" in
	--dir)
		[ $# -ge 2 ] || die "--dir needs a directory"
		DIR="$2"
		shift 2
		;;
	-h | --help)
		sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	*) die "unknown argument: $1 (see --help)" ;;
	esac
done

if [ ! -d "$DIR" ]; then
	log "nothing to stop: $DIR does not exist"
	exit 0
fi
DIR="$(cd "$DIR" && pwd)"
set_paths "$DIR"

# stop_group SIGNAL NAME...: sends SIGNAL to each named process still alive, waits up to
# GRACE_S for all of them, then SIGKILLs the rest; removes their pid files.
stop_group() {
	local sig=$1
	shift
	local name f pid pids=() names=()
	for name in "$@"; do
		f="$PID_DIR/$name.pid"
		[ -f "$f" ] || continue
		if pid="$(pid_alive "$f")"; then
			kill "-$sig" "$pid" 2>/dev/null || true
			pids+=("$pid")
			names+=("$name")
		else
			rm -f "$f"
		fi
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	local deadline=$((SECONDS + GRACE_S)) left
	while :; do
		left=0
		for name in "${names[@]}"; do
			if pid_alive "$PID_DIR/$name.pid" >/dev/null; then left=$((left + 1)); fi
		done
		if [ "$left" -eq 0 ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
		sleep 0.1
	done
	local i
	for i in "${!names[@]}"; do
		f="$PID_DIR/${names[$i]}.pid"
		if pid_alive "$f" >/dev/null; then
			log "${names[$i]} (pid ${pids[$i]}) ignored SIG$sig for ${GRACE_S}s: SIGKILL"
			kill -KILL "${pids[$i]}" 2>/dev/null || true
			for _ in $(seq 1 50); do
				pid_alive "$f" >/dev/null || break
				sleep 0.1
			done
			if pid_alive "$f" >/dev/null; then
				die "${names[$i]} (pid ${pids[$i]}) survived SIGKILL"
			fi
		fi
		rm -f "$f"
		log "stopped ${names[$i]} (pid ${pids[$i]})"
	done
}

if [ -d "$PID_DIR" ]; then
	agents=()
	for f in "$PID_DIR"/agent-*.pid; do
		if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
		agents+=("$(basename "$f" .pid)")
	done
	# Agents first (their batches are spooled on disk either way), then the coordinator (it
	# shuts down on SIGINT; its spool and state dir are durable), then the simulator.
	if [ ${#agents[@]} -gt 0 ]; then stop_group TERM "${agents[@]}"; fi
	GRACE_S=5 stop_group INT coordinator
	stop_group TERM coordinator sim
	# Anything else a start left (a process name this script does not know yet).
	others=()
	for f in "$PID_DIR"/*.pid; do
		if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
		others+=("$(basename "$f" .pid)")
	done
	if [ ${#others[@]} -gt 0 ]; then stop_group TERM "${others[@]}"; fi
fi

if [ -d "$CH_STATE" ]; then
	clickhouse_script stop >&2 || die "scripts/clickhouse.sh stop failed for $CH_STATE"
fi
rm -f "$PID_DIR/clickhouse.pid"
log "stack in $DIR stopped (logs in $LOG_DIR)"
