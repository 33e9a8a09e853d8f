#!/usr/bin/env bash
# Checks of the deployment files (terraform/, deploy/systemd/, deploy/container/): runs
# deploy/tests/test_deploy.py with pytest in a venv of its own and ends with one line
# "deploy-checks: N passed, N failed, N skipped"; exits non-zero when a check fails.
#
# The venv lives in ${LATMESH_DEPLOY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/latmesh/deploy-venv}
# and is (re)installed from deploy/tests/requirements.txt (pinned) only when that file
# changed, so runs after the first one work offline. No cloud account, Docker or Terraform
# needed; `terraform`, `systemd-analyze`, `systemd-sysusers` and `shellcheck` are used where
# they exist (their checks are skipped, and say so, elsewhere).
#
# Usage: scripts/deploy-checks.sh [pytest arguments, e.g. -k systemd]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
cache_root="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}"
venv="${LATMESH_DEPLOY_VENV:-$cache_root/latmesh/deploy-venv}"
requirements=deploy/tests/requirements.txt
stamp="$venv/.requirements.sha256"
want=$( (cat "$requirements"; "$PYTHON" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	echo "deploy-checks: installing $requirements into $venv" >&2
	rm -rf "$venv"
	mkdir -p "$(dirname "$venv")"
	"$PYTHON" -m venv "$venv"
	if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"; then
		rm -rf "$venv"
		echo "deploy-checks: pip install failed (the first run needs PyPI)" >&2
		echo "deploy-checks: 0 passed, 1 failed"
		exit 1
	fi
	echo "$want" >"$stamp"
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
set +e
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest deploy/tests -q -rs \
	-p no:cacheprovider --junitxml="$report" "$@"
status=$?
set -e
"$venv/bin/python" - "$report" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (ET.ParseError, FileNotFoundError):
    print("deploy-checks: 0 passed, 1 failed")
    sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
tests = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(f"deploy-checks: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
EOF
# pytest: 0 all passed, 1 some failed, 5 no test collected (a failure here too)
[ "$status" -eq 0 ] || exit 1
