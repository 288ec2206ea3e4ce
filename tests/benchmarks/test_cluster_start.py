"""The cold cluster-start figure can come from up.sh's own clock (a fresh machine's make test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cluster_start import latest_cold_record


def test_the_latest_cold_start_up_sh_recorded_is_published(tmp_path: Path) -> None:
    record = tmp_path / "cold-starts.jsonl"
    record.write_text(
        json.dumps({"seconds": 2100, "measured_on": "2026-12-01", "cpus": 2})
        + "\n"
        + json.dumps({"seconds": 1900, "measured_on": "2026-12-06", "cpus": 2})
        + "\n\n"
    )
    published = latest_cold_record(record)
    assert published["seconds"] == 1900
    assert published["measured_on"] == "2026-12-06"
    assert "up.sh" in published["source"]


def test_an_empty_record_is_refused_rather_than_published_as_nothing(tmp_path: Path) -> None:
    record = tmp_path / "cold-starts.jsonl"
    record.write_text("")
    with pytest.raises(SystemExit, match="no cold start"):
        latest_cold_record(record)
