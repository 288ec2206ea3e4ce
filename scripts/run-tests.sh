#!/usr/bin/env bash
# The suite in two processes at once: the tests on the real cluster (marker k8s: mostly waiting
# on pods) beside everything else, so the cluster's minutes overlap the rest instead of adding
# to them. Every test still runs. Prints one closing line over both, and fails if either did.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Kueue first (scripts/cluster/kueue.sh: built once into ~/.cache, minutes cold, seconds warm),
# in this half so its build overlaps the rest; if it cannot start, its test says so and the
# other cluster tests still run.
{
  bash scripts/cluster/kueue.sh >"$out/kueue.log" 2>&1 || { echo "kueue did not start:"; tail -n 40 "$out/kueue.log"; } >"$out/k8s.log"
  "$BIN/pytest" -m "k8s and not cluster_stop" -p no:cacheprovider --junitxml="$out/k8s.xml" "$@" >>"$out/k8s.log" 2>&1
  tests_rc=$?
  # Stopping the cluster (and starting it again) once every other test on it is done.
  "$BIN/pytest" -m cluster_stop -p no:cacheprovider --junitxml="$out/stop.xml" "$@" >>"$out/k8s.log" 2>&1
  stop_rc=$?
  [ "$tests_rc" = 0 ] && [ "$stop_rc" = 0 ]
} &
k8s=$!
# The placement property test in a process of its own: in the whole suite's process one of its
# examples ran for minutes after some earlier test's leftover state (which one is not found
# yet; alone, or after tests/launchers, tests/api/test_schemathesis.py, tests/estimates,
# tests/budgets or tests/catalog, its 40 examples take under a second).
isolated=tests/placement/test_extreme_inputs.py
"$BIN/pytest" -m "not k8s" --junitxml="$out/isolated.xml" "$@" "$isolated"
isolated_rc=$?
"$BIN/pytest" -m "not k8s" --junitxml="$out/main.xml" --ignore="$isolated" "$@"
main_rc=$?
[ "$isolated_rc" = 0 ] || main_rc=$isolated_rc
wait "$k8s"
k8s_rc=$?
echo
echo "=== the tests on the real cluster (marker k8s) ==="
# Its progress and failures, not its collection noise.
grep -vE '^(platform|cachedir|rootdir|configfile|plugins|timeout|collected)' "$out/k8s.log" | tail -n 200
# pytest exits 5 when it selects no test: for the k8s half that is a failure too.
"$BIN/python" - "$out/totals" "$out/isolated.xml" "$out/main.xml" "$out/k8s.xml" "$out/stop.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

totals = {"passed": 0, "failed": 0, "skipped": 0}
for path in sys.argv[2:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue
    for suite in root.iter("testsuite"):
        tests, failures = int(suite.get("tests", 0)), int(suite.get("failures", 0))
        errors, skipped = int(suite.get("errors", 0)), int(suite.get("skipped", 0))
        totals["failed"] += failures + errors
        totals["skipped"] += skipped
        totals["passed"] += tests - failures - errors - skipped
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
with open(sys.argv[1], "w") as out:
    out.write(f"{totals['passed']} {totals['failed']} {totals['skipped']}\n")
PY
rc=0
{ [ "$main_rc" = 0 ] && [ "$k8s_rc" = 0 ]; } || rc=1
read -r passed failed skipped <"$out/totals" || true
# The whole make test's time, for benchmarks/make_test.py (nothing when run outside make test).
bash scripts/test-clock.sh end "${passed:-0}" "${failed:-0}" "${skipped:-0}" "$rc" || true
exit "$rc"
