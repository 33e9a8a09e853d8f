#!/usr/bin/env bash
# Starts a whole latmesh stack as processes on loopback, every file of it in one folder:
# ClickHouse (scripts/clickhouse.sh, its own state dir), the schema (`latmesh db migrate`), the
# coordinator (`latmesh serve`, storing into that ClickHouse), the simulator (`latmesh-sim`) and
# three agents (us-east, eu-west, ap-southeast). Waits until every part is ready, then prints the
# addresses and the commands to run a campaign, and writes DIR/env (source it).
#
# Usage: deploy/local/start.sh [options]
#   --dir DIR                   the stack's folder: logs, pid files, state (default <repo>/.latmesh/local)
#   --bin-dir DIR               latmesh, latmesh-agent, latmesh-sim from here (default <repo>/target/debug,
#                               built with `cargo build --bins` when one is missing)
#   --build                     run `cargo build --bins` first (only with the default --bin-dir)
#   --coordinator-port PORT     coordinator gRPC port (default: a free one)
#   --sim-port PORT             simulator HTTP port (default: a free one)
#   --clickhouse-http-port PORT ClickHouse HTTP port (default: a free one)
#   --clickhouse-tcp-port PORT  ClickHouse native port (default: a free one)
#   --clickhouse-db NAME        database (default latmesh)
#   --timeout SECONDS           how long to wait for each part (default 60)
# Each option also reads LATMESH_LOCAL_<OPTION> from the environment (LATMESH_LOCAL_DIR,
# LATMESH_LOCAL_BIN_DIR, LATMESH_LOCAL_COORDINATOR_PORT, LATMESH_LOCAL_SIM_PORT,
# LATMESH_LOCAL_CLICKHOUSE_HTTP_PORT, LATMESH_LOCAL_CLICKHOUSE_TCP_PORT,
# LATMESH_LOCAL_CLICKHOUSE_DB, LATMESH_LOCAL_TIMEOUT_S); flags win.
#
# Stop it with deploy/local/stop.sh [--dir DIR]. A stack already running from DIR is not
# started twice. When a part fails to come up, what was started is stopped again and the
# failing part's log is shown; logs stay in DIR/logs.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
# shellcheck source=deploy/local/common.sh
. "$SCRIPT_DIR/common.sh"

HOST=127.0.0.1 # loopback only, on purpose
REGIONS=(us-east eu-west ap-southeast)
DIR="${LATMESH_LOCAL_DIR:-$REPO_ROOT/.latmesh/local}"
BIN_DIR="${LATMESH_LOCAL_BIN_DIR:-}"
BUILD=0
COORD_PORT="${LATMESH_LOCAL_COORDINATOR_PORT:-}"
SIM_PORT="${LATMESH_LOCAL_SIM_PORT:-}"
CH_HTTP_PORT="${LATMESH_LOCAL_CLICKHOUSE_HTTP_PORT:-}"
CH_TCP_PORT="${LATMESH_LOCAL_CLICKHOUSE_TCP_PORT:-}"
CH_DB="${LATMESH_LOCAL_CLICKHOUSE_DB:-latmesh}"
TIMEOUT_S="${LATMESH_LOCAL_TIMEOUT_S:-60}"

usage() {
	sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

need_value() { [ "$2" -ge 2 ] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
	case "$1" in
	--dir) need_value "$1" $#; DIR="$2"; shift 2 ;;
	--bin-dir) need_value "$1" $#; BIN_DIR="$2"; shift 2 ;;
	--build) BUILD=1; shift ;;
	--coordinator-port) need_value "$1" $#; COORD_PORT="$2"; shift 2 ;;
	--sim-port) need_value "$1" $#; SIM_PORT="$2"; shift 2 ;;
	--clickhouse-http-port) need_value "$1" $#; CH_HTTP_PORT="$2"; shift 2 ;;
	--clickhouse-tcp-port) need_value "$1" $#; CH_TCP_PORT="$2"; shift 2 ;;
	--clickhouse-db) need_value "$1" $#; CH_DB="$2"; shift 2 ;;
	--timeout) need_value "$1" $#; TIMEOUT_S="$2"; shift 2 ;;
	-h | --help) usage ;;
	*) die "unknown argument: $1 (see --help)" ;;
	esac
done

for p in COORD_PORT SIM_PORT CH_HTTP_PORT CH_TCP_PORT; do
	v="${!p}"
	if [ -n "$v" ] && ! { [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] && [ "$v" -le 65535 ]; }; then
		die "not a port: $v (${p})"
	fi
done
if ! [[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || [ "$TIMEOUT_S" -lt 1 ]; then die "--timeout: not a number of seconds: $TIMEOUT_S"; fi
[[ "$CH_DB" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "--clickhouse-db: not a database name: $CH_DB"
command -v setsid >/dev/null || die "setsid (util-linux) is needed to detach the processes"
command -v flock >/dev/null || die "flock (util-linux) is needed"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
set_paths "$DIR"
mkdir -p "$LOG_DIR" "$PID_DIR" "$DIR/coordinator" "$DIR/agents"

# One start at a time per folder. The lock's fd is closed in every child (9>&-), so a process
# started here never holds it.
exec 9>"$DIR/start.lock"
flock -n 9 || die "another start.sh is running on $DIR"

# ---- refuse to start a second stack in the same folder --------------------------------------
running=()
for f in "$PID_DIR"/*.pid; do
	if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
	if pid="$(pid_alive "$f")"; then running+=("$(basename "$f" .pid) (pid $pid)"); fi
done
if clickhouse_script status >/dev/null 2>&1; then running+=("clickhouse"); fi
if [ ${#running[@]} -gt 0 ]; then
	die "a stack is already running from $DIR: ${running[*]}; stop it first: $SCRIPT_DIR/stop.sh --dir $DIR"
fi
rm -f "$PID_DIR"/*.pid

# ---- binaries ---------------------------------------------------------------------------------
BINS=(latmesh latmesh-agent latmesh-sim)
missing_bins() {
	local b out=()
	for b in "${BINS[@]}"; do [ -x "$BIN_DIR/$b" ] || out+=("$b"); done
	echo "${out[*]}"
}
if [ -z "$BIN_DIR" ]; then
	BIN_DIR="$REPO_ROOT/target/debug"
	if [ "$BUILD" = 1 ] || [ -n "$(missing_bins)" ]; then
		command -v cargo >/dev/null || die "binaries missing in $BIN_DIR ($(missing_bins)) and no cargo to build them"
		log "building the binaries: cargo build --bins (in $REPO_ROOT)"
		(cd "$REPO_ROOT" && cargo build --bins) 9>&- >&2 || die "cargo build --bins failed"
	fi
else
	[ "$BUILD" = 0 ] || die "--build builds into target/debug: it does not go with --bin-dir"
	[ -d "$BIN_DIR" ] || die "--bin-dir $BIN_DIR: no such directory"
	BIN_DIR="$(cd "$BIN_DIR" && pwd)"
fi
[ -z "$(missing_bins)" ] || die "missing in $BIN_DIR: $(missing_bins) (build them with: cargo build --bins)"

# ---- from here on, a failure stops what was started ---------------------------------------------
READY=0
FAILED_LOG=""
on_exit() {
	local status=$?
	if [ "$READY" = 1 ]; then return; fi
	if [ -n "$FAILED_LOG" ] && [ -s "$FAILED_LOG" ]; then
		log "last lines of $FAILED_LOG:"
		tail -n 20 "$FAILED_LOG" | sed 's/^/    /' >&2
	fi
	log "start failed (exit $status): stopping what was started; logs stay in $LOG_DIR"
	"$SCRIPT_DIR/stop.sh" --dir "$DIR" 9>&- >&2 || true
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A log of this run: the previous one becomes NAME.log.1.
fresh_log() {
	local f="$LOG_DIR/$1.log"
	if [ -f "$f" ]; then mv -f "$f" "$f.1"; fi
	: >"$f"
	echo "$f"
}

# start_proc NAME LOG CMD...: starts CMD detached (own session: neither Ctrl-C here nor the end of
# this shell reaches it), stdin from /dev/null, stdout and stderr to LOG; writes DIR/pids/NAME.pid.
start_proc() {
	local name=$1 logf=$2
	shift 2
	# Without job control a background child is no process-group leader, so setsid does not
	# fork and $! is the process itself.
	setsid "$@" </dev/null >>"$logf" 2>&1 9>&- &
	local pid=$!
	write_pid "$PID_DIR/$name.pid" "$pid"
}

# wait_line NAME PIDFILE LOG PREFIX: waits for a line starting with PREFIX in LOG and prints its
# rest; fails when the process exits or after TIMEOUT_S. (It runs in a $(…) subshell: the caller
# sets FAILED_LOG.)
wait_line() {
	local name=$1 pidf=$2 logf=$3 prefix=$4 line
	local deadline=$((SECONDS + TIMEOUT_S))
	while :; do
		line="$(grep -m1 "^$prefix" "$logf" 2>/dev/null || true)"
		if [ -n "$line" ]; then
			echo "${line#"$prefix"}"
			return 0
		fi
		if ! pid_alive "$pidf" >/dev/null; then
			die "$name exited during startup; see $logf"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "$name printed no \"$prefix\" line within ${TIMEOUT_S}s; see $logf"
		fi
		sleep 0.1
	done
}

# ---- ClickHouse -----------------------------------------------------------------------------------
if [ -z "$CH_HTTP_PORT" ]; then CH_HTTP_PORT="$(free_port)"; fi
if [ -z "$CH_TCP_PORT" ]; then
	CH_TCP_PORT="$(free_port)"
	while [ "$CH_TCP_PORT" = "$CH_HTTP_PORT" ]; do CH_TCP_PORT="$(free_port)"; done
fi
[ "$CH_HTTP_PORT" != "$CH_TCP_PORT" ] || die "the ClickHouse HTTP and TCP ports must differ ($CH_HTTP_PORT)"
ch_log="$(fresh_log clickhouse)"
log "starting ClickHouse on $HOST:$CH_HTTP_PORT (scripts/clickhouse.sh; the first run installs Debian's clickhouse-server with apt)"
FAILED_LOG=$ch_log
CH_URL="$(LATMESH_CLICKHOUSE_HTTP_PORT="$CH_HTTP_PORT" LATMESH_CLICKHOUSE_TCP_PORT="$CH_TCP_PORT" \
	LATMESH_CLICKHOUSE_START_TIMEOUT_S="$TIMEOUT_S" clickhouse_script start 2>>"$ch_log" | tail -n 1)" ||
	die "ClickHouse did not start; see $ch_log and $CH_STATE/log/"
[[ "$CH_URL" == http://* ]] || die "scripts/clickhouse.sh printed no URL; see $ch_log"
ln -sfn "../clickhouse/clickhouse-server.pid" "$PID_DIR/clickhouse.pid"

# ---- schema -------------------------------------------------------------------------------------
migrate_log="$(fresh_log migrate)"
FAILED_LOG=$migrate_log
"$BIN_DIR/latmesh" db migrate --clickhouse-url "$CH_URL" --clickhouse-db "$CH_DB" 9>&- >>"$migrate_log" 2>&1 ||
	die "latmesh db migrate failed; see $migrate_log"
log "schema: $(tail -n 1 "$migrate_log")"

# ---- simulator ------------------------------------------------------------------------------------
sim_log="$(fresh_log sim)"
FAILED_LOG=$sim_log
start_proc sim "$sim_log" "$BIN_DIR/latmesh-sim" serve --listen "$HOST:${SIM_PORT:-0}"
SIM_URL="$(wait_line simulator "$PID_DIR/sim.pid" "$sim_log" "listening on ")"
SIM_ADDR="${SIM_URL#http://}"

# ---- coordinator ----------------------------------------------------------------------------------
coord_log="$(fresh_log coordinator)"
FAILED_LOG=$coord_log
start_proc coordinator "$coord_log" "$BIN_DIR/latmesh" serve \
	--listen "$HOST:${COORD_PORT:-0}" \
	--clickhouse-url "$CH_URL" --clickhouse-db "$CH_DB" \
	--spool-dir "$DIR/coordinator/spool" --state-dir "$DIR/coordinator/state"
COORD_URL="$(wait_line coordinator "$PID_DIR/coordinator.pid" "$coord_log" "listening on ")"

# ---- agents ---------------------------------------------------------------------------------------
for region in "${REGIONS[@]}"; do
	mkdir -p "$DIR/agents/$region"
	start_proc "agent-$region" "$(fresh_log "agent-$region")" "$BIN_DIR/latmesh-agent" \
		--coordinator "$COORD_URL" --region "$region" --agent-id "local-$region" \
		--spool-dir "$DIR/agents/$region/spool" --emulate-region
done

# Ready when `latmesh agents` lists every region's agent as connected.
agents_out="$LOG_DIR/agents.txt"
deadline=$((SECONDS + TIMEOUT_S))
while :; do
	"$BIN_DIR/latmesh" agents --coordinator "$COORD_URL" 9>&- >"$agents_out" 2>&1 || true
	connected=0
	for region in "${REGIONS[@]}"; do
		if awk -v r="$region" '$2 == r { for (i = 3; i <= NF; i++) if ($i == "connected") found = 1 } END { exit !found }' "$agents_out"; then
			connected=$((connected + 1))
		fi
	done
	[ "$connected" -lt ${#REGIONS[@]} ] || break
	for region in "${REGIONS[@]}"; do
		if ! pid_alive "$PID_DIR/agent-$region.pid" >/dev/null; then
			FAILED_LOG="$LOG_DIR/agent-$region.log"
			die "agent $region exited; see $FAILED_LOG"
		fi
	done
	if [ "$SECONDS" -ge "$deadline" ]; then
		FAILED_LOG=$agents_out
		die "only $connected of ${#REGIONS[@]} agents connected within ${TIMEOUT_S}s; see $LOG_DIR/agent-*.log"
	fi
	sleep 0.2
done

# ---- campaign file and env file ---------------------------------------------------------------
CAMPAIGN="$DIR/demo.toml"
{
	echo "# examples/demo.toml with the simulator's address of the local stack (deploy/local/start.sh)"
	sed "/^base_url/ s|{sim}|$SIM_ADDR|g" "$REPO_ROOT/examples/demo.toml"
} >"$CAMPAIGN.tmp"
mv -f "$CAMPAIGN.tmp" "$CAMPAIGN"

# Grafana provisioning for this stack: deploy/grafana/provisioning with the stack's ClickHouse
# port and database, and the dashboards directory of this repository.
GRAFANA_DIR="$DIR/grafana/provisioning"
mkdir -p "$GRAFANA_DIR/datasources" "$GRAFANA_DIR/dashboards"
sed -e "s|^\(      port:\) 18123\$|\1 $CH_HTTP_PORT|" -e "s|^\(      defaultDatabase:\) latmesh\$|\1 $CH_DB|" \
	"$REPO_ROOT/deploy/grafana/provisioning/datasources/clickhouse.yaml" >"$GRAFANA_DIR/datasources/clickhouse.yaml"
sed "s|^\(      path:\) .*\$|\1 $REPO_ROOT/deploy/grafana/dashboards|" \
	"$REPO_ROOT/deploy/grafana/provisioning/dashboards/latmesh.yaml" >"$GRAFANA_DIR/dashboards/latmesh.yaml"
grep -q "port: $CH_HTTP_PORT\$" "$GRAFANA_DIR/datasources/clickhouse.yaml" ||
	die "could not set the ClickHouse port in $GRAFANA_DIR/datasources/clickhouse.yaml"

{
	echo "# The local latmesh stack started by deploy/local/start.sh on $(date -u +%FT%TZ)."
	echo "# source it: the latmesh commands then find the coordinator and ClickHouse by themselves."
	for kv in \
		"LATMESH_COORDINATOR=$COORD_URL" \
		"LATMESH_CLICKHOUSE_URL=$CH_URL" \
		"LATMESH_CLICKHOUSE_DB=$CH_DB" \
		"LATMESH_SIM_URL=$SIM_URL" \
		"LATMESH_LOCAL_DIR=$DIR" \
		"LATMESH_LOCAL_BIN_DIR=$BIN_DIR" \
		"LATMESH_LOCAL_CAMPAIGN=$CAMPAIGN"; do
		printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
	done
} >"$DIR/env.tmp"
mv -f "$DIR/env.tmp" "$DIR/env"

READY=1
L="$BIN_DIR/latmesh"
cat <<EOF
latmesh local stack is up, everything in $DIR
  ClickHouse    $CH_URL  (database $CH_DB; native port $CH_TCP_PORT; log $CH_STATE/log/)
  coordinator   $COORD_URL  (log $LOG_DIR/coordinator.log)
  simulator     $SIM_URL/{provider}/v1  (log $LOG_DIR/sim.log)
  agents        ${REGIONS[*]}: ${#REGIONS[@]} connected  (logs $LOG_DIR/agent-*.log)
  env file      $DIR/env  (source it: LATMESH_COORDINATOR, LATMESH_CLICKHOUSE_URL, LATMESH_CLICKHOUSE_DB, ...)
  Grafana       $GRAFANA_DIR  (provisioning for this stack: deploy/grafana/README.md)

Run the demo campaign (examples/demo.toml with the simulator's address, about a minute):
  $L campaign launch $CAMPAIGN --coordinator $COORD_URL --json $DIR/summary.json
then, with its id:
  $L campaign verify CAMPAIGN_ID --clickhouse-url $CH_URL --clickhouse-db $CH_DB
  $L query matrix --campaign CAMPAIGN_ID --clickhouse-url $CH_URL --clickhouse-db $CH_DB
Stop everything:
  $SCRIPT_DIR/stop.sh --dir $DIR
EOF
