"""Process groups, as /proc shows them: which attempts' groups are alive, sampled in a thread,
and when two attempts of one job were alive at once (a duplicate the chaos benchmark counts)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_S = 0.2


def live_groups() -> set[int]:
    """Process group ids with at least one process that is not a zombie."""
    groups: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            groups.add(int(fields[2]))
    return groups


@dataclass
class GroupSeen:
    job_id: str
    first: float
    last: float


@dataclass
class Sampler:
    """Which attempts' process groups are alive, sampled; and when two of one job were."""

    attempts_dir: Path
    seen: dict[str, GroupSeen] = field(default_factory=dict)
    overlaps: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _groups(self) -> dict[str, tuple[int, str]]:
        found: dict[str, tuple[int, str]] = {}
        for pid_file in self.attempts_dir.glob("*/pid"):
            try:
                pid = int(json.loads(pid_file.read_text())["pid"])
                job_id = json.loads((pid_file.parent / "run_config.json").read_text())["job_id"]
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or it ended before its launch was recorded
            found[pid_file.parent.name] = (pid, str(job_id))
        return found

    def sample(self) -> dict[str, list[str]]:
        now = time.time()
        alive = live_groups()
        by_job: dict[str, list[str]] = {}
        for attempt_id, (pgid, job_id) in self._groups().items():
            if pgid not in alive:
                continue
            by_job.setdefault(job_id, []).append(attempt_id)
            record = self.seen.setdefault(attempt_id, GroupSeen(job_id, now, now))
            record.last = now
        for job_id, attempt_ids in by_job.items():
            if len(attempt_ids) > 1:
                self.overlaps.append({"job_id": job_id, "attempts": sorted(attempt_ids), "at": now})
        return by_job

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
