"""The start of an attempt, up to its first step: the checkpoint it resumes from, whether it may
train at all, and the writer it saves through.

Two orders. A run that trains at once reads its resume point before it builds: a checkpoint that
computes something else is refused before anything heavy is built. A standby (trainer.standby)
builds first and reads the store only once handed over: until then another attempt writes newer
checkpoints there, to resume from and not to clean up. Either way, a preemption notice before
the first step stops it with nothing new to save.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpujobs.runtime import EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT, RunConfig
from trainer.checkpoint import Checkpointer, CheckpointState, Store, discard_after, open_store
from trainer.checkpoint.writer import SaveResult
from trainer.distributed import DistContext
from trainer.preemption import PreemptionNotice
from trainer.progress import ProgressLog
from trainer.resume import (
    abort_incomplete_uploads,
    check_config,
    check_total_steps,
    find_checkpoint,
)
from trainer.standby import StandbyGate


@dataclass(frozen=True)
class Train:
    """Train from `step`, everything restored to `state` (None: from scratch), saving through
    `checkpointer`."""

    state: CheckpointState | None
    step: int
    checkpointer: Checkpointer

    @property
    def resumed_from(self) -> int | None:
        return self.state.step if self.state else None


@dataclass(frozen=True)
class Stopped:
    """Stopped before the first step, nothing saved: `state` is the checkpoint that holds all the
    work done (None: there is none)."""

    exit_code: int
    state: CheckpointState | None


class Start:
    """The start phase of one attempt: `run` ends in the step to train from, or in how it
    stopped before training."""

    def __init__(
        self,
        config: RunConfig,
        *,
        environ: Mapping[str, str],
        dist: DistContext,
        notice: PreemptionNotice,
        progress: ProgressLog,
        computing: dict[str, Any],
    ) -> None:
        self.config = config
        self.environ = environ
        self.dist = dist
        self.notice = notice
        self.progress = progress
        self.computing = computing

    def run(
        self,
        *,
        build: Callable[[], int],
        restore: Callable[[CheckpointState | None], None],
        close: Callable[[], None],
    ) -> Train | Stopped:
        """`build` builds the trainer and returns the total steps it trains to; `restore` sets
        it to a checkpoint (None: the data from its start); `close` closes what `build` opened,
        for a run that will not train."""
        gate = StandbyGate.for_run(
            self.config, self.environ, dist=self.dist, notice=self.notice, progress=self.progress
        )
        store = open_store(
            self.config.checkpoint_uri,
            endpoint_url=self.config.s3_endpoint_url,
            create=self.dist.is_main,
        )
        if gate is None:
            state = self._resume_point(store)
            if self._noticed():
                return self._preempted(state)
            total_steps = build()
        else:
            total_steps = build()
            answer = gate.wait()
            if answer is None or answer.action != "go":
                close()
                return self._stood_down(noticed=answer is None)
            state = self._resume_point(store)
        checkpointer = self._open_checkpointer(store, state, total_steps)
        restore(state)
        if state is not None:
            checkpointer.last_complete_step = state.step
        if self._noticed():
            close()
            return self._preempted(state)
        return Train(state, state.step if state else 0, checkpointer)

    def _noticed(self) -> bool:
        return self.dist.agree_any([self.notice.received])[0]

    def _preempted(self, state: CheckpointState | None) -> Stopped:
        """The notice came before the first step: nothing new to save. 75 when a checkpoint
        covers all the work done (the one found), 76 when there is none."""
        step = state.step if state else 0
        self.progress.event(
            "preempted", step=step, checkpoint_step=state.step if state else None, saved=False
        )
        return Stopped(EXIT_PREEMPTED if state else EXIT_PREEMPTED_NO_CHECKPOINT, state)

    def _stood_down(self, *, noticed: bool) -> Stopped:
        """A standby told to stop, or noticed while it waited: nothing saved, nothing in the
        store read or written, 76 (the control plane closes the standby itself)."""
        if noticed:
            # Withdrawn, or its spot capacity reclaimed. Either way it never trained; "preempted
            # step=0 saved=False" would read as lost work.
            self.progress.event("standby_stopped", noticed=True)
        return Stopped(EXIT_PREEMPTED_NO_CHECKPOINT, None)

    def _resume_point(self, store: Store) -> CheckpointState | None:
        """The checkpoint to resume from, refused if it computes something else."""
        state = find_checkpoint(store, self.dist)
        if state is not None:
            check_config(
                state,
                self.computing,
                allow_change=self.config.trainer.checkpoint.allow_config_change,
                progress=self.progress,
            )
        return state

    def _open_checkpointer(
        self, store: Store, state: CheckpointState | None, total_steps: int
    ) -> Checkpointer:
        """Checks what needs the data (the total steps), clears what a killed attempt left
        beyond the resume point, and opens this attempt's writer."""
        dist, spec = self.dist, self.config.trainer.checkpoint
        saved_total = state.shared.get("total_steps", total_steps) if state else None
        if saved_total is not None and saved_total != total_steps:
            check_total_steps(
                saved_total,
                total_steps,
                allow_change=spec.allow_config_change,
                progress=self.progress,
            )
        if dist.is_main:
            discard_after(store, state.step if state else None)
            abort_incomplete_uploads(store)
        nonce = dist.broadcast(uuid.uuid4().hex)
        dist.barrier()
        return Checkpointer(
            store,
            rank=dist.rank,
            world_size=dist.world_size,
            nonce=nonce,
            keep_last=spec.keep_last,
            on_complete=self._saved if dist.is_main else None,
        )

    def _saved(self, result: SaveResult) -> None:
        if result.ok:
            self.progress.event(
                "checkpoint",
                step=result.step,
                bytes=result.nbytes,
                upload_s=round(result.upload_s, 4),
            )
