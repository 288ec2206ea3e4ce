"""The training loop: build, resume, step, checkpoint, stop.

A step is `grad_accum_steps` micro-batches: DDP gradient sync only on the last one, the loss
divided by the number of micro-batches, gradients unscaled before clipping. After each step the
ranks agree on whether to stop (preemption notice) or take a timed checkpoint, so they always
stop and save at the same step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, TextIO

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpujobs.runtime import (
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_NO_CHECKPOINT,
    RunConfig,
)
from trainer import determinism, rng
from trainer.cadence import SaveCadence
from trainer.checkpoint import CheckpointState, StoreUnavailable
from trainer.config import ConfigError, checkpoint_interval, computing_config, fingerprint
from trainer.distributed import DistContext, init_distributed
from trainer.loader import BatchStream, build_loader
from trainer.optimization import lr_factor, make_optimizer, make_scheduler
from trainer.precision import Precision, choose_precision
from trainer.preemption import PreemptionNotice
from trainer.progress import ApiReporter, ProgressLog, Publisher
from trainer.sampler import DataPosition, ResumableSampler
from trainer.start import Start, Stopped
from trainer.workloads import Workload, load_workload

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
# The checkpoint store could not be read, even after retries: nothing was resumed, trained or
# deleted, and a later attempt can succeed. 74 is EX_IOERR from sysexits.h.
EXIT_STORE_UNAVAILABLE = 74


@dataclass
class RunResult:
    exit_code: int
    step: int
    total_steps: int
    steps_run: int
    train_s: float  # wall time of the steps this process ran, saves included, final save not
    train_cpu_s: float  # CPU time of this process over the same span (all its threads)
    checkpoint_stall_s: float  # total time training waited for checkpoints
    resumed_from: int | None
    checkpoint_step: int | None


class Trainer:
    def __init__(
        self,
        config: RunConfig,
        *,
        dist: DistContext | None = None,
        stdout: TextIO | None = None,
        environ: dict[str, str] | None = None,
        notice: PreemptionNotice | None = None,
    ) -> None:
        self.config = config
        self.spec = config.trainer
        self._own_dist = dist is None
        self.dist = dist or init_distributed()
        self.environ = dict(os.environ) if environ is None else environ
        self.progress = ProgressLog(enabled=self.dist.is_main, stream=stdout)
        # The entrypoint installs the notice before its heavy imports and hands it over here.
        self.notice = notice or PreemptionNotice()
        self.computing = computing_config(config)

    # -- building -------------------------------------------------------------------------

    def _build(self) -> int:
        """Everything training needs, built; the total steps it trains to."""
        spec, dist = self.spec, self.dist
        determinism.apply(spec.deterministic)
        rng.seed_everything(spec.seed)
        self.workload: Workload = load_workload(
            spec.workload, spec.args, allowed_prefixes=self.config.allowed_workload_prefixes
        )
        if spec.grad_checkpointing:
            if self.workload.set_grad_checkpointing is None:
                raise ConfigError(
                    f"workload {spec.workload!r} does not support grad_checkpointing "
                    "(its Workload has no set_grad_checkpointing)"
                )
            self.workload.set_grad_checkpointing(True)
        self.model: nn.Module = self.workload.model.to(dist.device)
        self.precision: Precision = choose_precision(spec.amp, dist.device)
        self.optimizer = make_optimizer(self.model, spec.learning_rate, dist.device)
        try:
            self.sampler = ResumableSampler(
                len(self.workload.train_dataset),  # type: ignore[arg-type]  # torch's Dataset has no __len__
                batch_size=spec.batch_size,
                rank=dist.rank,
                world_size=dist.world_size,
                seed=spec.seed,
            )
        except ValueError as exc:
            raise ConfigError(f"batch_size: {exc}") from exc
        if spec.steps is not None:
            self.total_steps = spec.steps
        else:
            assert spec.epochs is not None
            per_epoch = self.sampler.batches_per_epoch // spec.grad_accum_steps
            self.total_steps = max(1, spec.epochs * per_epoch)
        self.scheduler = make_scheduler(self.optimizer, self.total_steps)
        self.train_model: nn.Module = self.model
        if dist.distributed:
            device_ids = [dist.local_rank] if dist.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=device_ids)
        if spec.compile:
            # The wrapper only: checkpoints keep saving self.model, without compile's prefixes.
            self.train_model = torch.compile(self.train_model)  # type: ignore[assignment]
        loader = build_loader(
            self.workload.train_dataset,
            self.sampler,
            spec.dataloader,
            device=dist.device,
            collate_fn=self.workload.collate_fn,
        )
        self.stream = BatchStream(loader, self.sampler, dist.device, spec.seed)
        return self.total_steps

    # -- resuming (from what, in which order, whether it may: trainer.start, trainer.resume) -

    def _restore(self, state: CheckpointState | None) -> None:
        if state is None:
            self.stream.seek(DataPosition())
            return
        shared = state.shared
        self.model.load_state_dict(shared["model"])
        self.optimizer.load_state_dict(shared["optimizer"])
        self.scheduler.load_state_dict(shared["scheduler"])
        if self.spec.checkpoint.allow_config_change:
            self._apply_new_schedule()
        if self.precision.scaler.is_enabled() and shared.get("scaler"):
            self.precision.scaler.load_state_dict(shared["scaler"])
        part = state.ranks.get(self.dist.rank)
        exact = part is not None and state.world_size == self.dist.world_size
        if part is None:
            part = state.ranks[0]
        saved = part["data"]
        position = self.sampler.restore(
            saved["position"], batch_size=saved["batch_size"], world_size=saved["world_size"]
        )
        self.stream.seek(position)
        if exact:
            rng.restore(part["rng"])
        else:
            self.progress.event(
                "note",
                message=f"resuming a {state.world_size}-rank checkpoint on "
                f"{self.dist.world_size} ranks: data order is kept, the run is not bitwise exact",
            )

    # -- checkpointing --------------------------------------------------------------------

    def _shared_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
            "total_steps": self.total_steps,
        }

    def _rank_part(self) -> dict[str, Any]:
        return {
            "rng": rng.capture(),
            "data": {
                "position": self.stream.position.state_dict(),
                "batch_size": self.spec.batch_size,
                "world_size": self.dist.world_size,
            },
        }

    def _save(self, step: int, *, wait: bool) -> float:
        return self.checkpointer.save(
            step,
            shared=self._shared_state() if self.dist.is_main else None,
            part=self._rank_part(),
            meta={
                "job_id": self.config.job_id,
                "attempt_id": self.config.attempt_id,
                "config": self.computing,
                "config_sha256": fingerprint(self.computing),
            },
            wait=wait,
        )

    # -- the loop ---------------------------------------------------------------------------

    def _train_step(self) -> torch.Tensor:
        spec, scaler = self.spec, self.precision.scaler
        accum = spec.grad_accum_steps
        total = torch.zeros((), device=self.dist.device)
        for micro in range(accum):
            batch = self.stream.next()
            syncing = micro == accum - 1 or not self.dist.distributed
            no_sync = contextlib.nullcontext() if syncing else self.train_model.no_sync()  # type: ignore[operator]  # DDP only
            with no_sync:
                with self.precision.autocast():
                    loss = self.workload.loss_fn(self.train_model, batch)
                scaler.scale(loss / accum).backward()
            total += loss.detach().float()
        if spec.max_grad_norm is not None:
            scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), spec.max_grad_norm)
        scaler.step(self.optimizer)
        scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return total / accum

    def run(self) -> RunResult:
        own_notice = not self.notice.installed
        if own_notice:
            self.notice.install()
        try:
            return self._run()
        except StoreUnavailable as exc:
            log.error("the checkpoint store cannot be read; stopping without touching it: %s", exc)
            self.progress.event("store_unavailable", message=str(exc))
            return self._nothing_run(EXIT_STORE_UNAVAILABLE, None)
        finally:
            if own_notice:
                self.notice.uninstall()
            if self._own_dist:
                self.dist.shutdown()

    def _nothing_run(self, exit_code: int, state: CheckpointState | None) -> RunResult:
        """Stopped before its first step; `state`: the checkpoint that holds all its work."""
        resumed = state.step if state else None
        return RunResult(
            exit_code=exit_code,
            step=resumed or 0,
            total_steps=getattr(self, "total_steps", 0),
            steps_run=0,
            train_s=0.0,
            train_cpu_s=0.0,
            checkpoint_stall_s=0.0,
            resumed_from=resumed,
            checkpoint_step=resumed,
        )

    def _run(self) -> RunResult:
        start = Start(
            self.config,
            environ=self.environ,
            dist=self.dist,
            notice=self.notice,
            progress=self.progress,
            computing=self.computing,
        )
        started = start.run(
            build=self._build, restore=self._restore, close=lambda: self.stream.close()
        )
        if isinstance(started, Stopped):
            return self._nothing_run(started.exit_code, started.state)
        self.checkpointer = started.checkpointer
        interval = checkpoint_interval(self.config)
        self._announce(started.step, started.state, interval)
        reporter = ApiReporter.for_run(self.config, self.environ, dist=self.dist)
        try:
            return self._loop(started.step, started.resumed_from, interval, reporter)
        finally:
            self.checkpointer.wait()
            self.stream.close()
            if reporter is not None:
                reporter.close()

    def _announce(self, step: int, state: CheckpointState | None, interval: Any) -> None:
        spec = self.spec
        self.progress.event(
            "resume" if state else "start",
            step=step,
            total_steps=self.total_steps,
            world_size=self.dist.world_size,
            device=str(self.dist.device),
            amp=str(spec.amp) if self.precision.note is None else self.precision.note,
            checkpoint_every_steps=interval.every_steps,
            checkpoint_every_seconds=interval.every_seconds,
            deterministic=torch.are_deterministic_algorithms_enabled(),
            compiled=spec.compile,
        )

    def _apply_new_schedule(self) -> None:
        """The checkpoint's optimizer and scheduler carry the learning rate they were saved with;
        a resume allowed to change it (or the total steps) continues on the new schedule."""
        if self.scheduler.base_lrs == [self.spec.learning_rate] * len(self.scheduler.base_lrs):
            return  # unchanged: keep the restored values bit for bit
        self.scheduler.base_lrs = [self.spec.learning_rate] * len(self.scheduler.base_lrs)
        for group in self.optimizer.param_groups:
            group["initial_lr"] = self.spec.learning_rate
            group["lr"] = self.spec.learning_rate * lr_factor(
                self.scheduler.last_epoch, self.total_steps
            )

    def _loop(
        self, step: int, resumed_from: int | None, interval: Any, reporter: ApiReporter | None
    ) -> RunResult:
        dist = self.dist
        publisher = Publisher.for_run(
            self.config, dist=dist, progress=self.progress, reporter=reporter
        )
        cadence = SaveCadence(interval, keeps_time=dist.is_main)
        first_step, stall_total, exit_code = step, 0.0, EXIT_OK
        started, started_cpu = time.perf_counter(), time.process_time()
        while step < self.total_steps:
            loss = self._train_step()
            step += 1
            publisher.stepped()
            if step == first_step + 1:  # when this process's first step (a resumed one) is done
                self.progress.event("first_step", step=step)
            stop, timed_save = dist.agree_any([self.notice.received, cadence.time_due()])
            last = step == self.total_steps
            if last or stop or publisher.due():
                self._publish(publisher, step, loss)
            if last:
                break
            if stop:
                exit_code = self._preempt(step)
                publisher.publish_checkpoint(self.checkpointer.last_complete_step)
                break
            if timed_save or cadence.step_due(step):
                publisher.stall_s = self._save(step, wait=False)
                stall_total += publisher.stall_s
                cadence.saved()
        train_s, train_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
        if exit_code == EXIT_OK:
            exit_code = self._finish(step, resumed_from)
            publisher.publish_checkpoint(self.checkpointer.last_complete_step)
        return RunResult(
            exit_code=exit_code,
            step=step,
            total_steps=self.total_steps,
            steps_run=step - first_step,
            train_s=train_s,
            train_cpu_s=train_cpu_s,
            checkpoint_stall_s=stall_total,
            resumed_from=resumed_from,
            checkpoint_step=self.checkpointer.last_complete_step,
        )

    def _publish(self, publisher: Publisher, step: int, loss: torch.Tensor) -> None:
        if not publisher.enabled:
            return  # loss.item() would sync the device for nothing
        publisher.publish(
            step=step,
            total_steps=self.total_steps,
            loss=float(loss.item()),
            data_wait_s=self.stream.wait_s,
            checkpoint_step=self.checkpointer.last_complete_step,
        )

    def _preempt(self, step: int) -> int:
        saved = False
        if self.spec.checkpoint.on_preemption:
            self._save(step, wait=True)
            result = self.checkpointer.last_result
            saved = self.dist.all_true(result is not None and result.ok and result.step == step)
        self.progress.event(
            "preempted",
            step=step,
            checkpoint_step=self.checkpointer.last_complete_step,
            saved=saved,
        )
        return EXIT_PREEMPTED if saved else EXIT_PREEMPTED_NO_CHECKPOINT

    def _finish(self, step: int, resumed_from: int | None) -> int:
        """The final checkpoint holds the trained weights; without it the run has failed."""
        if resumed_from != step:
            self._save(step, wait=True)
            result = self.checkpointer.last_result
            ok = self.dist.all_true(result is not None and result.ok and result.step == step)
        else:
            ok = True  # resumed from the final checkpoint: nothing left to do
        self.progress.event("done", step=step, checkpoint_step=self.checkpointer.last_complete_step)
        return EXIT_OK if ok else EXIT_FAILED
