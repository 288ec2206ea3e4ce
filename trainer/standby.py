"""Standby (make-before-break, #25): an attempt that starts while another attempt of its job
still trains. It builds everything (imports, model, optimizer, data loader), then waits at this
gate, asking the control plane whether it may take over; only on `go` does it read the store.

Until then the running attempt writes checkpoints to the same prefix: the standby must neither
pick its resume point early (it would miss the newer ones) nor clean up after it (the cleanup of
a starting attempt deletes every checkpoint newer than its resume point).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping

import httpx
from pydantic import ValidationError

from gpujobs.runtime import ENV_JOB_TOKEN, RunConfig, StandbyAnswer, StandbyCall
from trainer.config import ConfigError
from trainer.distributed import DistContext
from trainer.preemption import PreemptionNotice
from trainer.progress import ProgressLog

log = logging.getLogger(__name__)

# The server will not answer otherwise later: the job's token revoked, the attempt not its own.
REFUSED = frozenset({401, 403, 404, 422})
CALL_TIMEOUT_S = 3.0
# How soon a preemption notice ends a pause between calls (standby_poll_s may be up to 60 s).
NOTICE_CHECK_S = 0.05


class StandbyGate:
    """Rank 0 asks `POST {api_url}/v1/jobs/{job_id}/standby` every `poll_s`; every rank gets
    its answer, so a gang goes, or stops, together."""

    def __init__(
        self,
        *,
        api_url: str,
        job_id: str,
        attempt_id: str,
        token: str,
        poll_s: float,
        dist: DistContext,
        notice: PreemptionNotice,
        progress: ProgressLog,
    ) -> None:
        self.url = f"{api_url.rstrip('/')}/v1/jobs/{job_id}/standby"
        self.call = StandbyCall(attempt_id=attempt_id)
        self.token = token
        self.poll_s = poll_s
        self.dist = dist
        self.notice = notice
        self.progress = progress
        self._failures = 0

    @classmethod
    def for_run(
        cls,
        config: RunConfig,
        environ: Mapping[str, str],
        *,
        dist: DistContext,
        notice: PreemptionNotice,
        progress: ProgressLog,
    ) -> StandbyGate | None:
        """The gate of a standby run; None for a run that trains at once. A standby that cannot
        ask would wait forever: refused before anything is built."""
        if not config.standby:
            return None
        token = environ.get(ENV_JOB_TOKEN)
        missing = [
            name
            for name, value in (
                ("api_url", config.api_url),
                ("attempt_id", config.attempt_id),
                (ENV_JOB_TOKEN, token),
            )
            if not value
        ]
        if missing:
            raise ConfigError("standby: cannot ask for the handover without " + ", ".join(missing))
        assert config.api_url and config.attempt_id and token
        return cls(
            api_url=config.api_url,
            job_id=config.job_id,
            attempt_id=config.attempt_id,
            token=token,
            poll_s=config.standby_poll_s,
            dist=dist,
            notice=notice,
            progress=progress,
        )

    def wait(self) -> StandbyAnswer | None:
        """The answer that ends the wait (`go` or `stop`, the same on every rank), or None when
        a preemption notice came first (on any rank)."""
        self.progress.event("standby", poll_s=self.poll_s)
        with self._client() as client:
            while True:
                if self.dist.agree_any([self.notice.received])[0]:
                    return None
                asked = self._ask(client) if client is not None else None
                answer: StandbyAnswer | None = self.dist.broadcast(asked)
                if answer is not None and answer.action != "wait":
                    self._answered(answer)
                    return answer
                self._pause()

    @contextlib.contextmanager
    def _client(self) -> Iterator[httpx.Client | None]:
        if not self.dist.is_main:
            yield None
            return
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        with httpx.Client(timeout=httpx.Timeout(CALL_TIMEOUT_S), headers=headers) as client:
            yield client

    def _ask(self, client: httpx.Client) -> StandbyAnswer | None:
        """The server's answer; None (keep waiting) when it cannot be had."""
        try:
            response = client.post(self.url, content=self.call.model_dump_json())
            if response.status_code in REFUSED:
                # Its token revoked (the job ended) or the attempt unknown: no answer will ever
                # come, and waiting on would hold the capacity for nothing.
                log.warning("standby: %s refused (%d): stopping", self.url, response.status_code)
                return StandbyAnswer(action="stop")
            response.raise_for_status()
            answer = StandbyAnswer.model_validate_json(response.content)
        except (httpx.HTTPError, ValidationError) as exc:
            self._failures += 1
            # One line per streak of failures, not one per call.
            if self._failures == 1:
                log.warning("standby: asking %s failed, still waiting: %s", self.url, exc)
            return None
        if self._failures:
            log.info("standby: %s answers again after %d failed calls", self.url, self._failures)
            self._failures = 0
        return answer

    def _answered(self, answer: StandbyAnswer) -> None:
        if answer.action == "go":
            log.info("standby: handed over (the server's checkpoint: %s)", answer.resume_from_step)
            self.progress.event("handover", resume_from_step=answer.resume_from_step)
        else:
            log.info("standby: told to stop; ending without touching the store")
            self.progress.event("standby_stopped")

    def _pause(self) -> None:
        deadline = time.monotonic() + self.poll_s
        while not self.notice.received and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, NOTICE_CHECK_S))
