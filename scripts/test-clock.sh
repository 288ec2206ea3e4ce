#!/usr/bin/env bash
# Times `make test` as a whole, its installs and builds included, for benchmarks/make_test.py:
#   test-clock.sh start                 before anything (the Makefile's first prerequisite)
#   test-clock.sh end PASSED FAILED SKIPPED RC   after the tests (scripts/run-tests.sh)
# A run is "fresh" when the cluster's binaries were not built yet as it started (a new machine:
# nothing under ~/.cache/gpujobs), "warm" otherwise. Records go to ~/.cache, never the clone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster/versions.sh
source "$here/cluster/versions.sh"
dir=$CACHE_ROOT/make-test
mkdir -p "$dir"
case "${1:-}" in
  start)
    cache=warm
    [ -x "$BIN_DIR/kubelet" ] || cache=fresh
    printf '{"started": %s, "cache": "%s"}\n' "$(date +%s)" "$cache" >"$dir/start.json"
    ;;
  end)
    [ -f "$dir/start.json" ] || exit 0  # the tests run without make test's clock
    python3 - "$dir" "$2" "$3" "$4" "$5" "$(nproc)" <<'PY'
import json, sys, time
from pathlib import Path

directory, passed, failed, skipped, rc, cpus = sys.argv[1:]
start = json.loads((Path(directory) / "start.json").read_text())
record = {
    **start,
    "ended": int(time.time()),
    "seconds": int(time.time()) - start["started"],
    "passed": int(passed), "failed": int(failed), "skipped": int(skipped),
    "exit_code": int(rc), "cpus": int(cpus),
}
with (Path(directory) / "runs.jsonl").open("a") as runs:
    runs.write(json.dumps(record) + "\n")
(Path(directory) / "start.json").unlink()
print(f"make test took {record['seconds']} s ({start['cache']} cache, {cpus} cpus)")
PY
    ;;
  *) echo "usage: $0 start | end PASSED FAILED SKIPPED RC" >&2; exit 2 ;;
esac
