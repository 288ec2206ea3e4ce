"""What the trainer tells the world: JSON lines on stdout (rank 0) and, when an API is
configured, ProgressReports posted in the background. Reporting never stops or slows training:
posts happen on their own thread with a short timeout, and failures are only logged."""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import httpx

from gpujobs.resources import ProgressReport
from gpujobs.runtime import ENV_JOB_TOKEN

if TYPE_CHECKING:
    from gpujobs.runtime import RunConfig
    from trainer.distributed import DistContext

log = logging.getLogger(__name__)


class ProgressLog:
    def __init__(self, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def _write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = json.dumps(record, default=str)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def event(self, name: str, **fields: Any) -> None:
        self._write({"event": name, "time": round(time.time(), 3), **fields})

    def metrics(self, report: ProgressReport) -> None:
        # A line's own `time` says when, for reading; `measured_at` is the server's, to count a
        # window once.
        figures = report.model_dump(exclude_none=True, exclude={"measured_at"})
        self._write({"time": round(time.time(), 3), **figures})


class MetricsWindow:
    """Throughput and data-wait fraction since the last report."""

    def __init__(self, samples_per_step: int) -> None:
        self.samples_per_step = samples_per_step
        self.reset(0.0)

    def reset(self, data_wait_s: float) -> None:
        self.start = time.perf_counter()
        self.steps = 0
        self.data_wait_start = data_wait_s

    def report(
        self, *, step: int, total_steps: int, loss: float | None, data_wait_s: float
    ) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        wait = min(1.0, max(0.0, (data_wait_s - self.data_wait_start) / elapsed))
        return {
            "step": step,
            "total_steps": total_steps,
            "loss": loss if loss is not None and math.isfinite(loss) else None,
            "samples_per_s": self.steps * self.samples_per_step / elapsed,
            "measured_at": datetime.now(UTC),
            "data_wait_fraction": wait,
        }


class Publisher:
    """The loop's figures: every `every_s`, at the last step and at a stop, on stdout and to the
    API; and again to the API, unchanged but for the checkpoint's step, once a checkpoint completes
    (the scheduler counts lost work and the resume point from it): the same window, at the same
    `measured_at`, which the server's rate counts once. Only rank 0 publishes."""

    def __init__(
        self,
        *,
        progress: ProgressLog,
        reporter: ApiReporter | None,
        samples_per_step: int,
        every_s: float,
        attempt_id: str | None,
        enabled: bool,
    ) -> None:
        self.progress = progress
        self.reporter = reporter
        self.window = MetricsWindow(samples_per_step)
        self.every_s = every_s
        self.attempt_id = attempt_id
        self.enabled = enabled
        self.stall_s = 0.0  # what the latest save made training wait
        self.last: ProgressReport | None = None
        self._last_at = time.monotonic()

    @classmethod
    def for_run(
        cls,
        config: RunConfig,
        *,
        dist: DistContext,
        progress: ProgressLog,
        reporter: ApiReporter | None,
    ) -> Publisher:
        spec = config.trainer
        return cls(
            progress=progress,
            reporter=reporter,
            samples_per_step=spec.batch_size * spec.grad_accum_steps * dist.world_size,
            every_s=config.progress_every_s,
            attempt_id=config.attempt_id,
            enabled=dist.is_main,
        )

    def stepped(self) -> None:
        self.window.steps += 1

    def due(self) -> bool:
        return time.monotonic() - self._last_at >= self.every_s

    def publish(
        self,
        *,
        step: int,
        total_steps: int,
        loss: float | None,
        data_wait_s: float,
        checkpoint_step: int | None,
    ) -> None:
        if not self.enabled:
            return
        figures = self.window.report(
            step=step, total_steps=total_steps, loss=loss, data_wait_s=data_wait_s
        )
        self._send(
            ProgressReport(
                **figures,
                checkpoint_stall_s=self.stall_s,
                checkpoint_step=checkpoint_step,
                attempt_id=self.attempt_id,
            )
        )
        self.window.reset(data_wait_s)
        self._last_at = time.monotonic()

    def publish_checkpoint(self, checkpoint_step: int | None) -> None:
        """To the API only: on stdout the step's line is there already, and the `done` or
        `preempted` line after it names the checkpoint (a second step line read as a repeat)."""
        if self.last is None or not self.enabled:
            return
        self._send(self.last.model_copy(update={"checkpoint_step": checkpoint_step}), log=False)

    def _send(self, report: ProgressReport, *, log: bool = True) -> None:
        if log:
            self.progress.metrics(report)
        if self.reporter is not None:
            self.reporter.update(report)
        self.last = report


class ApiReporter:
    """Posts the latest ProgressReport to `{api_url}/v1/jobs/{job_id}/progress` periodically."""

    def __init__(self, *, api_url: str, job_id: str, token: str, every_s: float) -> None:
        self.url = f"{api_url.rstrip('/')}/v1/jobs/{job_id}/progress"
        self.every_s = every_s
        self.client = httpx.Client(
            timeout=httpx.Timeout(3.0),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        self._latest: ProgressReport | None = None
        self._sent: ProgressReport | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._failures = 0
        self._thread = threading.Thread(target=self._run, name="progress-reporter", daemon=True)
        self._thread.start()

    @classmethod
    def for_run(
        cls, config: RunConfig, environ: Mapping[str, str], *, dist: DistContext
    ) -> ApiReporter | None:
        """Rank 0's reporter, where the run has an API to report to and a job token for it."""
        token = environ.get(ENV_JOB_TOKEN)
        if not (dist.is_main and config.api_url and token):
            return None
        return cls(
            api_url=config.api_url,
            job_id=config.job_id,
            token=token,
            every_s=config.progress_every_s,
        )

    def update(self, report: ProgressReport) -> None:
        self._latest = report

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.every_s)
            self._post()

    def _post(self) -> None:
        report = self._latest
        if report is None or report is self._sent:
            return
        try:
            response = self.client.post(self.url, content=report.model_dump_json())
            response.raise_for_status()
            self._sent = report
            self._failures = 0
        except httpx.HTTPError as exc:
            self._failures += 1
            # One line per streak of failures, not one per attempt.
            if self._failures == 1:
                log.warning("progress report to %s failed: %s", self.url, exc)

    def close(self) -> None:
        """Send the last report (best effort) and stop."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=5.0)
        self._post()
        self.client.close()
