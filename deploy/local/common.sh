# shellcheck shell=bash
# Shared by deploy/local/start.sh and stop.sh (sourced, not run). Needs REPO_ROOT.

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# set_paths DIR: the stack's layout inside DIR.
# shellcheck disable=SC2034
set_paths() {
	LOG_DIR="$1/logs"
	PID_DIR="$1/pids"
	CH_STATE="$1/clickhouse"
}

# scripts/clickhouse.sh on the stack's own state dir (its pid file, data and logs live there).
# fd 9 (start.sh's lock) is closed for it, so the server it starts never holds the lock.
clickhouse_script() {
	LATMESH_CLICKHOUSE_STATE_DIR="$CH_STATE" bash "$REPO_ROOT/scripts/clickhouse.sh" "$@" --state-dir "$CH_STATE" 9>&-
}

# Start time of process $1 in clock ticks since boot (field 22 of /proc/PID/stat; the fields
# are counted after the command name, which may hold spaces), or nothing.
proc_start() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
	stat="${stat##*) }"
	# shellcheck disable=SC2086
	set -- $stat
	# $1 is field 3 (state); field 22 is $20. Zombies count as gone.
	[ "$1" != "Z" ] || return 0
	echo "${20}"
}

# write_pid FILE PID: the pid on the first line, its start time on the second (so a pid reused
# by another process after ours ended is never taken for ours).
write_pid() {
	local start
	start="$(proc_start "$2")"
	printf '%s\n%s\n' "$2" "$start" >"$1.tmp"
	mv -f "$1.tmp" "$1"
}

# pid_alive FILE: prints the pid and succeeds when the process FILE names is still the one that
# was started (same start time) and not a zombie.
pid_alive() {
	local pid start now
	[ -f "$1" ] || return 1
	{
		read -r pid || true
		read -r start || true
	} <"$1"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	now="$(proc_start "$pid")"
	[ -n "$now" ] || return 1
	if [ -n "$start" ] && [ "$now" != "$start" ]; then return 1; fi
	echo "$pid"
}

# A free TCP port on 127.0.0.1 (bound then released).
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null && return 0
	fi
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "found no free port on 127.0.0.1"
}
