#!/usr/bin/env bash
# A real ClickHouse server on loopback for latmesh's tests and local use.
#
# Usage: scripts/clickhouse.sh start  [--state-dir DIR]   install if needed, start, print the URL
#        scripts/clickhouse.sh stop   [--state-dir DIR]   SIGTERM by pid file, SIGKILL after a grace
#        scripts/clickhouse.sh status [--state-dir DIR]   exit 0 when running and answering /ping
#        scripts/clickhouse.sh url    [--state-dir DIR]   print http://127.0.0.1:PORT
#        scripts/clickhouse.sh install                    apt-get install only
#
# Installs Debian's `clickhouse-server` and `clickhouse-client` packages (ClickHouse 18.16 on
# Debian 12) with apt when no server binary is found; the package install does not start
# anything. The server then runs as the current user (root in CI) from a config written into the
# state dir: data, tmp, user files, format schemas, logs, pid file and users.xml all live there,
# it listens on 127.0.0.1 only, and the `default` user has no password and a profile with
# `allow_experimental_low_cardinality_type = 1` (needed by 18.16 for LowCardinality; never send
# that setting from a client, current servers reject it). Server time zone: UTC.
#
# Environment:
#   LATMESH_CLICKHOUSE_STATE_DIR      state dir (default: <repo>/.latmesh/clickhouse)
#   LATMESH_CLICKHOUSE_HTTP_PORT      HTTP port (default 18123)
#   LATMESH_CLICKHOUSE_TCP_PORT       native TCP port (default 19000)
#   LATMESH_CLICKHOUSE_START_TIMEOUT_S  how long `start` waits for /ping (default 60)
#
# `start` is idempotent: a server already running from the same state dir is reused. Several
# `start`s at once (parallel tests) serialize on a lock file in the state dir.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

HOST=127.0.0.1 # loopback only, on purpose: not configurable
HTTP_PORT="${LATMESH_CLICKHOUSE_HTTP_PORT:-18123}"
TCP_PORT="${LATMESH_CLICKHOUSE_TCP_PORT:-19000}"
START_TIMEOUT_S="${LATMESH_CLICKHOUSE_START_TIMEOUT_S:-60}"
STATE_DIR="${LATMESH_CLICKHOUSE_STATE_DIR:-$REPO_ROOT/.latmesh/clickhouse}"

log() { printf 'clickhouse.sh: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

parse_state_dir() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--state-dir)
			[ $# -ge 2 ] || die "--state-dir needs a directory"
			STATE_DIR="$2"
			shift 2
			;;
		--state-dir=*)
			STATE_DIR="${1#--state-dir=}"
			shift
			;;
		*) die "unknown argument: $1" ;;
		esac
	done
	[[ "$HTTP_PORT" =~ ^[0-9]+$ ]] || die "LATMESH_CLICKHOUSE_HTTP_PORT is not a port: $HTTP_PORT"
	[[ "$TCP_PORT" =~ ^[0-9]+$ ]] || die "LATMESH_CLICKHOUSE_TCP_PORT is not a port: $TCP_PORT"
	mkdir -p "$STATE_DIR"
	STATE_DIR="$(cd "$STATE_DIR" && pwd)"
	PID_FILE="$STATE_DIR/clickhouse-server.pid"
	LOG_FILE="$STATE_DIR/log/clickhouse-server.log"
	ERR_LOG_FILE="$STATE_DIR/log/clickhouse-server.err.log"
	STDOUT_LOG="$STATE_DIR/log/stdout.log"
	CONFIG="$STATE_DIR/config.xml"
}

url() { echo "http://$HOST:$HTTP_PORT"; }

# The server binary: Debian's /usr/sbin/clickhouse-server, or the single `clickhouse` binary of
# upstream packages (run as `clickhouse server`).
server_cmd() {
	if [ -x /usr/sbin/clickhouse-server ]; then
		echo /usr/sbin/clickhouse-server
	elif [ -x /usr/bin/clickhouse-server ]; then
		echo /usr/bin/clickhouse-server
	elif [ -x /usr/bin/clickhouse ]; then
		echo "/usr/bin/clickhouse server"
	fi
}

cmd_install() {
	if [ -n "$(server_cmd)" ]; then
		return 0
	fi
	command -v apt-get >/dev/null || die "no ClickHouse server found and no apt-get to install one: install clickhouse-server yourself"
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || die "installing clickhouse-server needs root (or sudo)"
		sudo=(sudo -n)
	fi
	log "installing clickhouse-server and clickhouse-client with apt (one-time)"
	export DEBIAN_FRONTEND=noninteractive
	# Two installs at once (parallel test binaries) would fight over the dpkg lock.
	local lock=/tmp/latmesh-clickhouse-apt.lock
	(
		flock -w 600 9 || die "timed out waiting for $lock"
		if [ -n "$(server_cmd)" ]; then exit 0; fi
		"${sudo[@]}" apt-get update -qq || die "apt-get update failed"
		"${sudo[@]}" apt-get install -y -qq --no-install-recommends \
			-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
			clickhouse-server clickhouse-client >&2 ||
			die "apt-get install clickhouse-server clickhouse-client failed"
	) 9>"$lock"
	[ -n "$(server_cmd)" ] || die "clickhouse-server installed but no server binary found in /usr/sbin or /usr/bin"
}

# Print the pid of the server started from this state dir, or nothing.
running_pid() {
	local pid state
	[ -f "$PID_FILE" ] || return 0
	pid="$(cat "$PID_FILE" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 0
	[ -r "/proc/$pid/cmdline" ] || return 0
	state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
	[ "$state" != "Z" ] || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONFIG" || return 0
	echo "$pid"
}

# GET $1 and print the body; curl, wget, or bash's /dev/tcp on a bare machine.
http_get() {
	local path=$1
	if command -v curl >/dev/null; then
		curl -fsS --max-time 2 "$(url)$path" 2>/dev/null
	elif command -v wget >/dev/null; then
		wget -q -T 2 -O - "$(url)$path" 2>/dev/null
	else
		local body
		body="$(
			exec 3<>"/dev/tcp/$HOST/$HTTP_PORT" || exit 1
			printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$HOST" >&3
			timeout 2 cat <&3
		)" || return 1
		printf '%s' "$body" | sed '1,/^\r\{0,1\}$/d'
	fi
}

pinging() { [ "$(http_get /ping 2>/dev/null || true)" = "Ok." ]; }

port_busy() { # port_busy PORT: whether something listens on 127.0.0.1:PORT
	(exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

write_config() {
	mkdir -p "$STATE_DIR"/{data,tmp,user_files,format_schemas,log}
	cat >"$CONFIG" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/clickhouse.sh; rewritten on every start. -->
<yandex>
    <logger>
        <level>information</level>
        <log>$LOG_FILE</log>
        <errorlog>$ERR_LOG_FILE</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>$HOST</listen_host>
    <http_port>$HTTP_PORT</http_port>
    <tcp_port>$TCP_PORT</tcp_port>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>$STATE_DIR/data/</path>
    <tmp_path>$STATE_DIR/tmp/</tmp_path>
    <user_files_path>$STATE_DIR/user_files/</user_files_path>
    <format_schema_path>$STATE_DIR/format_schemas/</format_schema_path>
    <users_config>$STATE_DIR/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</yandex>
EOF
	cat >"$STATE_DIR/users.xml" <<'EOF'
<?xml version="1.0"?>
<!-- Written by scripts/clickhouse.sh; rewritten on every start. -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
            <!-- 18.16 needs this for LowCardinality columns; current servers reject it from a
                 client, so it lives here, server-side. -->
            <allow_experimental_low_cardinality_type>1</allow_experimental_low_cardinality_type>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
EOF
}

show_log_tail() {
	local f
	for f in "$ERR_LOG_FILE" "$STDOUT_LOG"; do
		if [ -s "$f" ]; then
			log "last lines of $f:"
			tail -n 15 "$f" | sed 's/^/    /' >&2
		fi
	done
}

cmd_start() {
	parse_state_dir "$@"
	command -v setsid >/dev/null || die "setsid (util-linux) is needed to detach the server"
	cmd_install
	exec 8>"$STATE_DIR/start.lock"
	flock -w 300 8 || die "timed out waiting for another start ($STATE_DIR/start.lock)"
	local pid
	pid="$(running_pid)"
	if [ -n "$pid" ]; then
		if pinging; then
			url
			return 0
		fi
		log "server (pid $pid) is running but not answering yet; waiting"
	else
		rm -f "$PID_FILE"
		if port_busy "$HTTP_PORT"; then
			die "port $HOST:$HTTP_PORT is in use by another process (not started from $STATE_DIR); set LATMESH_CLICKHOUSE_HTTP_PORT or stop it"
		fi
		if port_busy "$TCP_PORT"; then
			die "port $HOST:$TCP_PORT is in use by another process; set LATMESH_CLICKHOUSE_TCP_PORT or stop it"
		fi
		write_config
		local cmd
		read -r -a cmd <<<"$(server_cmd)"
		printf '=== start %s\n' "$(date -u +%FT%TZ)" >>"$STDOUT_LOG"
		# setsid: own session, so neither Ctrl-C nor the end of the calling shell (or test)
		# reaches it. Without job control a background child is no group leader, so setsid
		# does not fork and $! is the server's own pid.
		setsid "${cmd[@]}" --config-file="$CONFIG" </dev/null >>"$STDOUT_LOG" 2>&1 8>&- &
		pid=$!
		echo "$pid" >"$PID_FILE"
	fi
	local deadline=$((SECONDS + START_TIMEOUT_S))
	until pinging; do
		if [ -z "$(running_pid)" ]; then
			show_log_tail
			die "clickhouse-server (pid $pid) exited during startup; see $ERR_LOG_FILE and $STDOUT_LOG"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			show_log_tail
			die "clickhouse-server (pid $pid) did not answer $(url)/ping within ${START_TIMEOUT_S}s; see $LOG_FILE (still running: stop it with $0 stop --state-dir $STATE_DIR)"
		fi
		sleep 0.2
	done
	log "clickhouse-server running (pid $pid, state $STATE_DIR)"
	url
}

cmd_stop() {
	parse_state_dir "$@"
	local pid
	pid="$(running_pid)"
	if [ -z "$pid" ]; then
		rm -f "$PID_FILE"
		log "not running"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 150); do
		[ -n "$(running_pid)" ] || break
		sleep 0.1
	done
	if [ -n "$(running_pid)" ]; then
		log "clickhouse-server (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			[ -n "$(running_pid)" ] || break
			sleep 0.1
		done
	fi
	rm -f "$PID_FILE"
	log "stopped clickhouse-server (pid $pid)"
}

cmd_status() {
	parse_state_dir "$@"
	local pid
	pid="$(running_pid)"
	if [ -z "$pid" ]; then
		echo "stopped  $(url)  (state $STATE_DIR)"
		return 1
	fi
	if pinging; then
		echo "running  pid $pid  $(url)  (state $STATE_DIR)"
	else
		echo "starting pid $pid  $(url)  (not answering /ping yet; state $STATE_DIR)"
		return 1
	fi
}

cmd_url() {
	parse_state_dir "$@"
	url
}

main() {
	[ $# -ge 1 ] || usage
	local sub=$1
	shift
	case "$sub" in
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	status) cmd_status "$@" ;;
	url) cmd_url "$@" ;;
	install) cmd_install ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
