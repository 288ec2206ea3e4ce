"""make test clocks itself (scripts/test-clock.sh) and benchmarks/make_test.py publishes the
latest passing run of each kind: the clock's records, end to end, in a scratch cache root."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from benchmarks.make_test import latest
from devstack.stack import ROOT

CLOCK = ROOT / "scripts" / "test-clock.sh"


def _clock(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUJOBS_CACHE": str(cache)}
    return subprocess.run(["bash", str(CLOCK), *args], env=env, capture_output=True, text=True)


def test_a_run_on_a_machine_without_the_clusters_binaries_is_fresh_then_warm(
    tmp_path: Path,
) -> None:
    assert _clock(tmp_path, "start").returncode == 0
    done = _clock(tmp_path, "end", "10", "0", "2", "0")
    assert done.returncode == 0, done.stderr
    assert "fresh cache" in done.stdout
    # The cluster's binaries now exist: the next run is warm.
    version = next(
        line.split("=", 1)[1]
        for line in (ROOT / "scripts" / "cluster" / "versions.sh").read_text().splitlines()
        if line.startswith("KUBERNETES_VERSION=")
    )
    bin_dir = tmp_path / "cluster" / f"bin-k{version}"
    bin_dir.mkdir(parents=True)
    (bin_dir / "kubelet").write_text("#!/bin/sh\n")
    (bin_dir / "kubelet").chmod(0o755)
    _clock(tmp_path, "start")
    _clock(tmp_path, "end", "9", "1", "2", "1")
    records = [json.loads(line) for line in (tmp_path / "make-test" / "runs.jsonl").open()]
    assert [(r["cache"], r["passed"], r["failed"], r["exit_code"]) for r in records] == [
        ("fresh", 10, 0, 0),
        ("warm", 9, 1, 1),
    ]
    # Only a passing run is published: no warm figure from a failed one.
    assert latest(records, "fresh") == records[0]
    assert latest(records, "warm") is None


def test_the_end_without_a_start_records_nothing(tmp_path: Path) -> None:
    assert _clock(tmp_path, "end", "1", "0", "0", "0").returncode == 0
    assert not (tmp_path / "make-test" / "runs.jsonl").exists()
