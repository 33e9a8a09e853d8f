#!/usr/bin/env bash
# Load benchmarks (issue 9, "Performance"): one agent's probe engine and open-loop scheduler
# against latmesh-sim on loopback (agent/benches/load.rs), then the coordinator's merging and
# acking with 50 agents' worth of batches (coordinator/benches/merge.rs --load). Prints
# markdown tables.
#
#   scripts/bench-load.sh            # full run, about 2.5 minutes after the release build
#   scripts/bench-load.sh --write    # and update BENCHMARKS.md between the benches' markers
#   scripts/bench-load.sh --smoke    # tiny sizes, for CI: under 30 s after the build
#
# --smoke builds with the dev profile (what `cargo test` already built, so CI compiles
# little more); the numbers of a smoke run are not measurements. LATMESH_BENCH_CARGO_PROFILE
# overrides the profile (`bench` for release). The benches' own knobs (LATMESH_LOAD_*,
# LATMESH_MERGE_BATCHES) pass through the environment.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
args=()
for a in "$@"; do
	case "$a" in
	--smoke)
		smoke=1
		args+=("$a")
		;;
	--write) args+=("$a") ;;
	-h | --help)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "bench-load.sh: unknown argument $a (--smoke, --write)" >&2
		exit 2
		;;
	esac
done

profile=${LATMESH_BENCH_CARGO_PROFILE:-}
if [ -z "$profile" ]; then
	if [ "$smoke" = 1 ]; then profile=dev; else profile=bench; fi
fi

echo "== agent load bench (cargo bench -p latmesh-agent --bench load, profile $profile)"
cargo bench --locked --profile "$profile" -p latmesh-agent --bench load -- ${args[@]+"${args[@]}"}
echo "== coordinator merge bench (cargo bench -p latmesh-coordinator --bench merge -- --load, profile $profile)"
cargo bench --locked --profile "$profile" -p latmesh-coordinator --bench merge -- --load ${args[@]+"${args[@]}"}
