"""How long the local cluster (scripts/cluster/, `make cluster`) takes to be usable.

    python -m benchmarks.cluster_start [--warm-runs 3] [--cold | --cold-record FILE]

warm: the cluster stopped (`down.sh`), its binaries and state kept; `up.sh` to a Ready node with
      the default service account (what `make test` waits for on a machine that ran it before).
cold: nothing cached: a fresh cache root (GPUJOBS_CACHE: the Go module and build caches and the
      binaries) and no state (`down.sh --purge`): every component downloaded from the Go module
      proxy and built, then started. Tens of minutes on two cores; the machine's cache is left as
      it was (the cold build's cache is removed after).
--cold-record: publish the latest cold start up.sh timed itself (it appends one to
      CACHE_ROOT/cluster/cold-starts.jsonl whenever it starts with nothing built and no state, as
      `make test` on a fresh machine does), instead of building again.
A cold figure measured before is kept when this run measures only warm ones (its date says when).
Writes benchmarks/results/cluster_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.recovery import RESULTS, machine_info
from devstack.cluster import SCRIPTS

OUT = RESULTS / "cluster_start.json"


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return time.monotonic() - started


def warm_start() -> float:
    _run("up.sh")  # built and running, whatever state it was in
    _run("down.sh")
    return _run("up.sh")


def cold_start() -> float:
    cache = Path(tempfile.mkdtemp(prefix="gpujobs-cold-cache-"))
    try:
        _run("down.sh", "--purge")
        seconds = _run("up.sh", env={"GPUJOBS_CACHE": str(cache)})
        _run("down.sh")
        return seconds
    finally:
        # Go marks its module cache read-only.
        subprocess.run(["chmod", "-R", "u+w", str(cache)], check=False)
        shutil.rmtree(cache, ignore_errors=True)


def latest_cold_record(path: Path) -> dict[str, Any]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{path}: no cold start recorded")
    record: dict[str, Any] = json.loads(lines[-1])
    return {**record, "source": "up.sh's own clock on a cold start (make test, fresh machine)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-runs", type=int, default=3)
    cold_from = parser.add_mutually_exclusive_group()
    cold_from.add_argument("--cold", action="store_true", help="also build from nothing (slow)")
    cold_from.add_argument("--cold-record", type=Path, help="up.sh's cold-starts.jsonl")
    args = parser.parse_args()
    today = datetime.now(UTC).date().isoformat()
    previous: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() else {}
    cold: dict[str, Any] | None = None
    if args.cold:
        cold = {"seconds": round(cold_start(), 1), "measured_on": today}
    elif args.cold_record:
        cold = latest_cold_record(args.cold_record)
    warm = [warm_start() for _ in range(args.warm_runs)]
    result = {
        "benchmark": "cluster_start",
        "warm_s": {
            "median": round(statistics.median(warm), 1),
            "max": round(max(warm), 1),
            "runs": [round(w, 1) for w in warm],
            "measured_on": today,
        },
        "cold_s": cold or previous.get("cold_s"),
        "what": "up.sh to a Ready node and the default service account; cold: from an empty "
        "cache root (Go modules, Go build cache, binaries) and no state",
        "machine": machine_info(),
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({key: result[key] for key in ("warm_s", "cold_s")}))


if __name__ == "__main__":
    main()
