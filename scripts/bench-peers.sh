#!/usr/bin/env bash
# Peers side by side (issue 9): the same streaming workloads driven by latmesh, GuideLLM and
# AIPerf against the same simulator, each tool's client CPU per million streamed tokens and its
# TTFT error against the simulator's ground truth, next to the machine's floor: a raw client
# that only streams and stamps every frame (agent/benches/peers_floor.rs). Not part of the
# test run.
#
#   scripts/bench-peers.sh [--write] [--only latmesh|floor|guidellm|aiperf[,…]]
#
#   --write   also write the table into BENCHMARKS.md (between the peers markers, in the
#             section "Peers side by side (GuideLLM, AIPerf)")
#   --only    run only these tools (repeatable or comma-separated); the table shows what ran
#
# What it does:
#  1. Makes one virtual environment per peer under ${LATMESH_PEERS_DIR:-~/.cache/latmesh-peers}
#     (reused when present): guidellm==0.8.* (~6 GB: torch) and aiperf==0.13.* (~1.2 GB), both
#     installed in the background while step 2 builds; and an offline byte-level BPE tokenizer
#     (scripts/lib/peers/make_tokenizer.py: deterministic, fixed seed), since neither peer runs
#     without a Hugging Face tokenizer and the hub is not reachable.
#  2. Builds the release binaries (latmesh, latmesh-agent, latmesh-sim) and, for the floor,
#     the bench binary `cargo bench -p latmesh-agent --bench peers_floor --no-run` (copied to
#     the result folder as peers_floor, so every row runs the same build).
#  3. For every workload (LATMESH_PEERS_WORKLOADS, default "c64 c1000:5000 r40 r200": cN = closed
#     loop at concurrency N, rN = open loop at N requests/s, constant arrivals; each
#     LATMESH_PEERS_REQUESTS = 2000 requests, or R with a suffix :R) and every tool: a fresh `latmesh-sim serve
#     --truth-all` on loopback pinned to core 1 (one provider, TTFT fixed, exactly
#     LATMESH_PEERS_TOKENS one-token chunks LATMESH_PEERS_ITL_US apart, `usage`), the tool pinned to
#     core 0 under scripts/lib/peers/rusage.py (user+sys CPU of its whole process tree, peak RSS
#     summed over the tree), then the simulator's `GET /_truth` (every request's server-side
#     TTFT and tokens). latmesh runs as a user runs it: `latmesh serve`, one `latmesh-agent
#     --exit-after 1` and `latmesh campaign launch` of a sweep (closed loop) or rate (open loop)
#     campaign, all on core 0. The floor runs as one process (current-thread tokio, the
#     accuracy bench's raw client: hand-written HTTP/1.1 with keep-alive, one read per
#     wake-up, token frames found by their marker bytes, no SSE/JSON parsing), closed loop
#     with --concurrency N, open loop with --rate N (an arrival every 1/N s from a start
#     instant, each its own task). Each row holds the lock ${LATMESH_BENCH_LOCK:-/tmp/latmesh-bench.lock}
#     (flock) so it never overlaps another benchmark on this machine.
#  4. Prints the markdown table (scripts/lib/peers/report.py), and with --write puts it in
#     BENCHMARKS.md.
#
# Knobs (environment): LATMESH_PEERS_WORKLOADS, LATMESH_PEERS_REQUESTS (2000),
# LATMESH_PEERS_TTFT_MS (50), LATMESH_PEERS_ITL_US (2000), LATMESH_PEERS_TOKENS (256),
# LATMESH_PEERS_PROMPT_TOKENS (128), LATMESH_PEERS_TIMEOUT_S (900, per tool run),
# LATMESH_PEERS_OUT (result folder, default target/bench-peers/UTC-DATE), LATMESH_PEERS_DIR,
# LATMESH_PEERS_PYTHON (python3: the interpreter the venvs are made from).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$ROOT/scripts/lib/peers
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
PEERS_DIR=${LATMESH_PEERS_DIR:-$HOME/.cache/latmesh-peers}
PY=${LATMESH_PEERS_PYTHON:-python3}
REQUESTS=${LATMESH_PEERS_REQUESTS:-2000}
WORKLOADS=${LATMESH_PEERS_WORKLOADS:-c64 c1000:5000 r40 r200}
TTFT_MS=${LATMESH_PEERS_TTFT_MS:-50}
ITL_US=${LATMESH_PEERS_ITL_US:-2000}
TOKENS=${LATMESH_PEERS_TOKENS:-256}
PROMPT_TOKENS=${LATMESH_PEERS_PROMPT_TOKENS:-128}
TIMEOUT_S=${LATMESH_PEERS_TIMEOUT_S:-900}
LOCK=${LATMESH_BENCH_LOCK:-/tmp/latmesh-bench.lock}
OUT=${LATMESH_PEERS_OUT:-$ROOT/target/bench-peers/$(date -u +%Y%m%dT%H%M%SZ)}
MODEL=peer-model
PROVIDER=peer

WRITE=0
ONLY=""
COMMAND="scripts/bench-peers.sh $*"
while [ $# -gt 0 ]; do
    case "$1" in
        --write) WRITE=1 ;;
        --only) shift; ONLY="$ONLY,${1:?--only needs a tool}" ;;
        --only=*) ONLY="$ONLY,${1#--only=}" ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
TOOLS=()
for t in latmesh floor guidellm aiperf; do
    if [ -z "$ONLY" ] || [[ ",$ONLY," == *",$t,"* ]]; then TOOLS+=("$t"); fi
done
[ ${#TOOLS[@]} -gt 0 ] || { echo "--only: none of latmesh, floor, guidellm, aiperf" >&2; exit 2; }
wants() { [[ " ${TOOLS[*]} " == *" $1 "* ]]; }
for w in $WORKLOADS; do
    [[ "$w" =~ ^[cr][1-9][0-9]*(:[1-9][0-9]*)?$ ]] || { echo "LATMESH_PEERS_WORKLOADS: bad workload $w (cN or rN, optionally :REQUESTS)" >&2; exit 2; }
done

log() { printf '[bench-peers %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

mkdir -p "$OUT/runs" "$PEERS_DIR"
log "results in $OUT"
# 1,000 streams need 1,000+ descriptors on each side.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# ---------------------------------------------------------------------------------------
# 1. Virtual environments (in the background) and the tokenizer.

declare -A INSTALL_PID=()
venv_ready() { [ -x "$PEERS_DIR/$1-venv/bin/$1" ]; }
install_peer() { # name pip-spec
    local name=$1 spec=$2 venv=$PEERS_DIR/$1-venv
    if venv_ready "$name"; then log "$name: venv $venv (kept)"; return; fi
    log "$name: installing '$spec' into $venv in the background (log $PEERS_DIR/$name-install.log)"
    (
        "$PY" -m venv "$venv" &&
            "$venv/bin/pip" install -q --upgrade pip &&
            "$venv/bin/pip" install "$spec"
    ) >"$PEERS_DIR/$name-install.log" 2>&1 &
    INSTALL_PID[$name]=$!
}
wait_peer() { # name → 0 when usable
    local name=$1
    if [ -n "${INSTALL_PID[$name]:-}" ]; then
        log "$name: waiting for its install"
        wait "${INSTALL_PID[$name]}" || log "$name: install FAILED (see $PEERS_DIR/$name-install.log)"
        unset "INSTALL_PID[$name]"
    fi
    venv_ready "$name"
}
wants guidellm && install_peer guidellm 'guidellm==0.8.*'
wants aiperf && install_peer aiperf 'aiperf==0.13.*'

# ---------------------------------------------------------------------------------------
# 2. Release binaries.

log "building release binaries"
(cd "$ROOT" && cargo build --release -q -p latmesh-sim -p latmesh-coordinator -p latmesh-agent)
# The floor: a bench binary (its path has a hash in it); copied so every row runs this build.
FLOOR_BIN=$OUT/peers_floor
if wants floor; then
    log "building the floor (cargo bench -p latmesh-agent --bench peers_floor --no-run)"
    floor_built=$(cd "$ROOT" && cargo bench -q -p latmesh-agent --bench peers_floor --no-run \
        --message-format=json-render-diagnostics |
        "$PY" -c 'import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "peers_floor" and m.get("executable"):
        print(m["executable"])')
    [ -x "$floor_built" ] || { log "the floor's bench binary was not built"; exit 1; }
    cp "$floor_built" "$FLOOR_BIN"
fi
# What was built (the tree may move on during the run).
GIT_REV="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet HEAD 2>/dev/null || echo '+changes')"

TOK=$PEERS_DIR/tokenizer
make_tokenizer() {
    [ -f "$TOK/tokenizer.json" ] && return 0
    local v
    for v in aiperf guidellm; do
        if wants "$v" && wait_peer "$v"; then
            "$PEERS_DIR/$v-venv/bin/python" "$LIB/make_tokenizer.py" "$TOK" "$ROOT/sim/src/text.rs" 2>&1 |
                grep -v 'PyTorch was not found' >&2
            return 0
        fi
    done
    return 1
}

# The simulator's one provider.
cat >"$OUT/profiles.json" <<EOF
[{"name": "$PROVIDER",
  "description": "bench-peers: TTFT $TTFT_MS ms fixed, $TOKENS one-token chunks $ITL_US µs apart",
  "models": ["$MODEL"],
  "ttft_base_us": $((TTFT_MS * 1000)), "ttft_jitter_sigma": 0.0,
  "itl_median_us": $ITL_US, "itl_sigma": 0.0,
  "tokens_per_chunk_min": 1, "tokens_per_chunk_max": 1,
  "output_tokens_min": $TOKENS, "output_tokens_max": $TOKENS}]
EOF

# latmesh's prompt: PROMPT_TOKENS of the simulator's answer words (one token each with the
# peers' tokenizer), fixed seed.
"$PY" - "$ROOT/sim/src/text.rs" "$PROMPT_TOKENS" >"$OUT/prompts.jsonl" <<'EOF'
import json, random, re, sys
src = open(sys.argv[1], encoding="utf-8").read()
words = re.findall(r'"([^"]+)"', src.split("const WORDS: &[&str] = &[", 1)[1].split("];", 1)[0])
rng = random.Random(128)
text = " ".join(rng.choice(words) for _ in range(int(sys.argv[2])))
print(json.dumps({"id": "peer-prompt", "version": 1, "class": "short-qa", "lang": "en",
                  "max_tokens_hint": 256, "messages": [{"role": "user", "content": text}]}))
EOF

# ---------------------------------------------------------------------------------------
# 3. The runs.

SIM_PID=""
SIM_ADDR=""
LATMESH_PIDS=() # coordinator and agent wrappers of the running latmesh row
start_sim() { # run-dir
    local run=$1 i
    taskset -c 1 "$BIN/latmesh-sim" serve --listen 127.0.0.1:0 --profiles "$OUT/profiles.json" \
        --truth-all >"$run/sim.log" 2>&1 &
    SIM_PID=$!
    for i in $(seq 100); do
        SIM_ADDR=$(sed -n 's#^listening on http://##p' "$run/sim.log" 2>/dev/null | head -n1) || true
        [ -n "$SIM_ADDR" ] && return 0
        sleep 0.1
    done
    log "simulator did not start: $(cat "$run/sim.log")"
    return 1
}
stop_sim() {
    [ -n "$SIM_PID" ] || return 0
    kill "$SIM_PID" 2>/dev/null || true
    wait "$SIM_PID" 2>/dev/null || true
    SIM_PID=""
}
cleanup() {
    local p
    stop_sim
    for p in "${LATMESH_PIDS[@]}" "${INSTALL_PID[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# run.json: what ran (tool, workload, requests, exit status, failure, exact commands).
REQ=$REQUESTS
run_json() { # run-dir tool workload exit failure cmd...
    local run=$1
    shift
    "$PY" -c 'import json, sys
a = sys.argv[2:]
print(json.dumps({"tool": a[0], "workload": a[1], "requests": int(sys.argv[1]),
                  "exit": int(a[2]) if a[2] else None, "failure": a[3] or None, "commands": a[4:]}))' "$REQ" "$@" >"$run/run.json"
}

# run.json of a tool's row: failed when it timed out (exit 124) or left no result file (then
# with the first error line of its log, or its last line).
row_json() { # run-dir tool workload exit result-file cmd
    local run=$1 tool=$2 w=$3 rc=$4 result=$5 cmd=$6 fail="" why
    [ "$rc" -eq 124 ] && fail="timed out after ${TIMEOUT_S} s"
    if [ ! -s "$result" ]; then
        why=$(grep -m1 -E 'Error|error' "$run/tool.log" || tail -n1 "$run/tool.log")
        fail="${fail:-exit $rc, no $(basename "$result")}: $(printf '%s' "$why" | cut -c1-160)"
    fi
    run_json "$run" "$tool" "$w" "$rc" "$fail" "$cmd"
}
q() { printf '%q ' "$@" | sed 's/ $//'; }

measure() { # rusage-json cmd… : the tool on core 0, its process tree measured, with a timeout
    local ru=$1
    shift
    timeout --kill-after=30 "$TIMEOUT_S" taskset -c 0 "$PY" "$LIB/rusage.py" "$ru" -- "$@"
}

run_guidellm() { # run-dir workload
    local run=$1 w=$2 profile
    if ! wait_peer guidellm || ! make_tokenizer; then
        run_json "$run" guidellm "$w" "" "guidellm is not installed (see $PEERS_DIR/guidellm-install.log)"
        return 0
    fi
    if [ "${w:0:1}" = c ]; then profile="kind=concurrent,streams=${w:1}"; else profile="kind=constant,rate=${w:1}"; fi
    local cmd=("$PEERS_DIR/guidellm-venv/bin/guidellm" run
        --backend "kind=openai_http,target=http://$SIM_ADDR/$PROVIDER,model=$MODEL,validate_backend=false"
        --profile "$profile" --constraint "kind=max_requests,count=$REQ"
        --data "kind=synthetic_text,prompt_tokens=$PROMPT_TOKENS,output_tokens=$TOKENS"
        --tokenizer "kind=huggingface_auto,model=$TOK" --disable-console-interactive)
    local rc=0
    (cd "$run" && measure "$run/rusage.json" env HF_HUB_OFFLINE=1 "${cmd[@]}" >"$run/tool.log" 2>&1) || rc=$?
    row_json "$run" guidellm "$w" "$rc" "$run/benchmarks.json" "HF_HUB_OFFLINE=1 taskset -c 0 $(q "${cmd[@]}")"
}

run_aiperf() { # run-dir workload
    local run=$1 w=$2 load
    if ! wait_peer aiperf || ! make_tokenizer; then
        run_json "$run" aiperf "$w" "" "aiperf is not installed (see $PEERS_DIR/aiperf-install.log)"
        return 0
    fi
    if [ "${w:0:1}" = c ]; then load=(--concurrency "${w:1}"); else load=(--request-rate "${w:1}" --arrival-pattern constant); fi
    local cmd=("$PEERS_DIR/aiperf-venv/bin/aiperf" profile --url "http://$SIM_ADDR/$PROVIDER"
        --endpoint-type chat --streaming -m "$MODEL" --tokenizer "$TOK" "${load[@]}"
        --request-count "$REQ" --isl "$PROMPT_TOKENS" --isl-stddev 0 --osl "$TOKENS"
        --ui none --no-server-metrics --no-gpu-telemetry --artifact-dir "$run/artifacts")
    local rc=0
    # AIPerf takes the tokenizer path for a hub repo id when HF_HUB_OFFLINE is set.
    (cd "$run" && measure "$run/rusage.json" env -u HF_HUB_OFFLINE "${cmd[@]}" >"$run/tool.log" 2>&1) || rc=$?
    row_json "$run" aiperf "$w" "$rc" "$run/artifacts/profile_export.jsonl" "taskset -c 0 $(q "${cmd[@]}")"
}

run_floor() { # run-dir workload
    local run=$1 w=$2 load
    if [ "${w:0:1}" = c ]; then load=(--concurrency "${w:1}"); else load=(--rate "${w:1}"); fi
    local cmd=("$FLOOR_BIN" --url "http://$SIM_ADDR/$PROVIDER/v1" --model "$MODEL"
        --prompt-file "$OUT/prompts.jsonl" --max-tokens "$TOKENS" --requests "$REQ" "${load[@]}"
        --json "$run/floor.json")
    local rc=0
    measure "$run/rusage.json" "${cmd[@]}" >"$run/tool.log" 2>&1 || rc=$?
    row_json "$run" floor "$w" "$rc" "$run/floor.json" "taskset -c 0 $(q "${cmd[@]}")"
}

latmesh_campaign() { # workload → campaign TOML on stdout
    local w=$1 n=${1:1}
    printf '[campaign]\nname = "peers-%s"\nregions = ["local"]\nprompt_set = "%s"\n\n' "$w" "$OUT/prompts.jsonl"
    printf '[[scenarios]]\nname = "peers"\nprompt_ids = ["peer-prompt"]\nstream = true\nmax_tokens = %s\n' "$TOKENS"
    if [ "${w:0:1}" = c ]; then
        # One step of N workers ending after REQUESTS requests; the step lasts step_s whatever
        # happens (every region steps at the same instants), so it is about three times the
        # time the requests need at the simulator's pace (the agent idles after the last).
        local step_s
        step_s=$("$PY" -c "import math; r=math.ceil($REQ/$n); print(math.ceil(3*r*($TTFT_MS/1e3+$TOKENS*$ITL_US/1e6))+10)")
        printf 'load = "sweep"\n[scenarios.sweep]\nconcurrency = [%s]\nstep_requests = %s\nstep_s = %s\n' "$n" "$REQ" "$step_s"
    else
        local dur
        dur=$("$PY" -c "print($REQ/$n)")
        printf 'load = "rate"\n[scenarios.rate]\nrps = %s\narrivals = "constant"\nduration_s = %s\nmax_queue_s = 10\n' "$n" "$dur"
    fi
    printf '\n[[providers]]\nname = "%s"\nbase_url = "http://%s/%s/v1"\nmodel_id = "%s"\n' "$PROVIDER" "$SIM_ADDR" "$PROVIDER" "$MODEL"
}

run_latmesh() { # run-dir workload
    local run=$1 w=$2 i coord_url="" rc=0 fail=""
    latmesh_campaign "$w" >"$run/campaign.toml"
    local coord=("$BIN/latmesh" serve --listen 127.0.0.1:0 --state-dir "$run/coordinator-state")
    local agent_base=("$BIN/latmesh-agent" --region local --agent-id peers-local --exit-after 1 --spool-dir "$run/agent-spool")
    # Servers in the background: $! is the wrapper (taskset execs it), which passes SIGTERM on.
    taskset -c 0 "$PY" "$LIB/rusage.py" "$run/rusage-coordinator.json" -- "${coord[@]}" >"$run/coordinator.log" 2>&1 &
    local coord_pid=$!
    LATMESH_PIDS=("$coord_pid")
    for i in $(seq 100); do
        coord_url=$(sed -n 's#^listening on ##p' "$run/coordinator.log" 2>/dev/null | head -n1) || true
        [ -n "$coord_url" ] && break
        sleep 0.1
    done
    if [ -z "$coord_url" ]; then
        kill "$coord_pid" 2>/dev/null || true
        run_json "$run" latmesh "$w" "" "the coordinator did not start"
        return 0
    fi
    local agent=("${agent_base[@]}" --coordinator "$coord_url")
    taskset -c 0 "$PY" "$LIB/rusage.py" "$run/rusage-agent.json" -- "${agent[@]}" >"$run/agent.log" 2>&1 &
    local agent_pid=$!
    LATMESH_PIDS+=("$agent_pid")
    for i in $(seq 100); do
        grep -q 'connected' "$run/agent.log" 2>/dev/null && break
        sleep 0.1
    done
    local launch=("$BIN/latmesh" campaign launch "$run/campaign.toml" --coordinator "$coord_url"
        --start-delay-s 1 --json "$run/summary.json")
    measure "$run/rusage-launch.json" "${launch[@]}" >"$run/launch.log" 2>&1 || rc=$?
    # The agent exits once the campaign's results are acked.
    for i in $(seq 600); do
        kill -0 "$agent_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$agent_pid" 2>/dev/null && fail="the agent did not exit after the campaign"
    wait "$agent_pid" 2>/dev/null || true
    kill "$coord_pid" 2>/dev/null || true
    wait "$coord_pid" 2>/dev/null || true
    [ $rc -eq 124 ] && fail="timed out after ${TIMEOUT_S} s"
    [ -f "$run/summary.json" ] || fail="${fail:-exit $rc, no summary}: $(tail -n1 "$run/launch.log" | cut -c1-160)"
    run_json "$run" latmesh "$w" "$rc" "$fail" \
        "taskset -c 0 $(q "${coord[@]}")" \
        "taskset -c 0 $(q "${agent_base[@]}") --coordinator URL" \
        "taskset -c 0 $(q "${launch[@]}")"
}

run_row() { # tool workload (cN or rN) requests
    local tool=$1 w=$2 run=$OUT/runs/$2-$1
    REQ=$3
    rm -rf "$run"
    mkdir -p "$run"
    log "$w: $tool (waiting for $LOCK)"
    # Peers' installs and the tokenizer happen before the lock is taken.
    case $tool in
        guidellm|aiperf) wait_peer "$tool" >/dev/null || true; make_tokenizer || true ;;
    esac
    (
        trap cleanup EXIT # this subshell's simulator and latmesh processes, however it ends
        flock 9
        cat /proc/loadavg >"$run/loadavg.before"
        start_sim "$run"
        log "$w: $tool against http://$SIM_ADDR/$PROVIDER/v1"
        "run_$tool" "$run" "$w"
        curl -sf "http://$SIM_ADDR/_truth" >"$run/truth.ndjson" || log "$w: $tool: no ground truth"
        stop_sim
        cat /proc/loadavg >"$run/loadavg.after"
    ) 9>"$LOCK"
    "$PY" "$LIB/report.py" row "$run" >&2 || log "$w: $tool: no row ($run)"
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for w in $WORKLOADS; do
    req=$REQUESTS
    [[ "$w" == *:* ]] && req=${w#*:}
    for t in "${TOOLS[@]}"; do
        run_row "$t" "${w%%:*}" "$req"
    done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------
# 4. The table.

REQ=$REQUESTS
ver() { "$PEERS_DIR/$1-venv/bin/pip" show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
SIM_ADDR=127.0.0.1:PORT
"$PY" - "$OUT/meta.json" <<EOF
import json, sys
json.dump({
    "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
    "nproc": "$(nproc)",
    "cpu": "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)",
    "mem": "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)",
    "kernel": "$(uname -r)",
    "git": "$GIT_REV",
    "guidellm": "GuideLLM $(ver guidellm)",
    "aiperf": "AIPerf $(ver aiperf)",
    "python": "$("$PY" -c 'import platform; print(platform.python_version())')",
    "load_start": "$LOAD_START",
    "load_end": "$LOAD_END",
    "command": "$COMMAND",
    "knobs": "workloads \`$WORKLOADS\`, $REQUESTS requests unless the workload says :R",
    "requests": $REQUESTS, "ttft_ms": $TTFT_MS, "itl_us": $ITL_US, "tokens": $TOKENS,
    "prompt_tokens": $PROMPT_TOKENS,
    "campaigns": [$(for w in c64 r40; do latmesh_campaign "$w" | sed "s#$OUT/##" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; echo ,; done)],
}, open(sys.argv[1], "w"), indent=1)
EOF
if [ $WRITE = 1 ]; then
    "$PY" "$LIB/report.py" table "$OUT" --write "$ROOT/BENCHMARKS.md"
else
    "$PY" "$LIB/report.py" table "$OUT"
fi
