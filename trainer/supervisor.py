"""`python -m trainer.supervisor`: PID 1 of a Kubernetes trainer pod, starting the ranks itself.

torchrun as PID 1 answers SIGTERM (the spot notice, `kubectl delete pod`) by killing its workers
after 30 s and exiting 1, so the trainer's 75/76 never reach Kubernetes and a preemption reads
as a failure. This supervisor starts this node's ranks with the static `env://` layout torchrun
would give them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...; no elastic restarts, which the
control plane does itself), forwards the notice to every rank, waits for them within the grace
period and exits with what the ranks say together: 75 when every rank saved its checkpoint.

As PID 1 it also reaps orphans (DataLoader workers whose rank died), which nothing else would.
It imports no torch: the notice is handled from the first instruction on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from gpujobs.runtime import EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT

NOTICE_CODES = (EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT)
POLL_S = 0.1


@dataclass(frozen=True)
class Layout:
    """Where this node's ranks sit in the job: torchrun's static rendezvous, by hand."""

    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def rank_env(self, local_rank: int, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        env.update(
            RANK=str(self.node_rank * self.nproc_per_node + local_rank),
            LOCAL_RANK=str(local_rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_WORLD_SIZE=str(self.nproc_per_node),
            GROUP_RANK=str(self.node_rank),
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.master_port),
        )
        if self.nproc_per_node > 1:
            # torchrun's default too: N ranks each spawning one thread per core thrash the CPU.
            env.setdefault("OMP_NUM_THREADS", "1")
        return env


def pod_exit_code(codes: Sequence[int], *, noticed: bool, failed_first: int | None) -> int:
    """The pod's exit status from its ranks' (`os.waitstatus_to_exitcode` form: -N = signal N).

    A rank that failed before any notice decides: the others were stopped because of it. After
    a notice (ours, or a rank that exited 75/76 on its own), 75 only if every rank that stopped
    early saved its checkpoint; anything else (killed at the end of the grace period, crashed
    because a peer vanished) is a preemption without a checkpoint, 76.
    """
    if failed_first is not None:
        return _as_status(failed_first)
    if all(code == 0 for code in codes):
        return 0
    if noticed or any(code in NOTICE_CODES for code in codes):
        if all(code in (0, EXIT_PREEMPTED) for code in codes):
            return EXIT_PREEMPTED
        return EXIT_PREEMPTED_NO_CHECKPOINT
    return _as_status(next(code for code in codes if code != 0))


def _as_status(code: int) -> int:
    """A shell-style status: killed by signal N becomes 128 + N."""
    return 128 - code if code < 0 else code


class Supervisor:
    def __init__(
        self,
        layout: Layout,
        command: Sequence[str],
        *,
        grace_s: float,
        stop_s: float,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.layout = layout
        self.command = list(command)
        self.grace_s = grace_s
        self.stop_s = stop_s
        self.environ = environ
        self.ranks: dict[int, subprocess.Popen[bytes]] = {}  # pid -> rank process
        self.codes: dict[int, int] = {}  # local rank -> exit code
        self.noticed = False
        self.failed_first: int | None = None
        self._kill_at: float | None = None

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_notice)
        for local_rank in range(self.layout.nproc_per_node):
            if self.noticed:
                break  # the notice came while starting: do not start more ranks
            process = subprocess.Popen(
                self.command, env=self.layout.rank_env(local_rank, self.environ)
            )
            self.ranks[process.pid] = process
        if self.noticed:
            # A rank started while the notice was being handled has not been told yet.
            self._signal_running(signal.SIGTERM)
        while len(self.codes) < len(self.ranks):
            self._reap()
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self._signal_running(signal.SIGKILL)
                self._kill_at = None
            time.sleep(POLL_S)
        codes = [self.codes[rank] for rank in sorted(self.codes)]
        if len(codes) < self.layout.nproc_per_node:
            # The notice came before every rank was started: nothing can have completed.
            codes += [EXIT_PREEMPTED_NO_CHECKPOINT] * (self.layout.nproc_per_node - len(codes))
        return pod_exit_code(codes, noticed=self.noticed, failed_first=self.failed_first)

    def _on_notice(self, signum: int, _frame: FrameType | None) -> None:
        if not self.noticed:
            self.noticed = True
            self._stop_within(self.grace_s)
        self._signal_running(signal.Signals(signum))

    def _reap(self) -> None:
        """Collect every exited child, orphans included (we are PID 1 in the pod)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            process = self.ranks.get(pid)
            if process is None:
                continue  # an adopted orphan: reaped, nothing to record
            process.returncode = code = os.waitstatus_to_exitcode(status)
            local_rank = list(self.ranks).index(pid)
            self.codes[local_rank] = code
            self._on_rank_exit(local_rank, code)

    def _on_rank_exit(self, local_rank: int, code: int) -> None:
        if code == 0 or self.noticed:
            return
        if code in NOTICE_CODES:
            # This rank stopped for a notice we did not see: the others must save too.
            self.noticed = True
            self._stop_within(self.grace_s)
        elif self.failed_first is None:
            print(
                f"trainer.supervisor: rank {local_rank} exited {code}; stopping the others",
                file=sys.stderr,
                flush=True,
            )
            self.failed_first = code
            self._stop_within(self.stop_s)
        self._signal_running(signal.SIGTERM)

    def _stop_within(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        if self._kill_at is None or deadline < self._kill_at:
            self._kill_at = deadline

    def _signal_running(self, sig: signal.Signals) -> None:
        for process in self.ranks.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)


def parse(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> Supervisor:
    args = list(argv)
    command = [sys.executable, "-m", "trainer"]
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1 :] or command
    parser = argparse.ArgumentParser(prog="python -m trainer.supervisor", description=__doc__)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--nproc-per-node", type=int, default=1)
    parser.add_argument(
        "--node-rank",
        type=int,
        # Set by the Job controller on an Indexed Job's pods.
        default=int(environ.get("JOB_COMPLETION_INDEX", "0")),
    )
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument(
        "--grace-s",
        type=float,
        default=110.0,
        help="after the notice, how long ranks get to checkpoint before SIGKILL (keep it under "
        "the pod's terminationGracePeriodSeconds so the exit code is ours, not the kubelet's)",
    )
    parser.add_argument(
        "--stop-s",
        type=float,
        default=30.0,
        help="after a rank fails, how long the others get to stop before SIGKILL",
    )
    options = parser.parse_args(args)
    if options.nnodes < 1 or options.nproc_per_node < 1:
        parser.error("--nnodes and --nproc-per-node must be at least 1")
    if not 0 <= options.node_rank < options.nnodes:
        parser.error(f"--node-rank {options.node_rank} is outside 0..{options.nnodes - 1}")
    layout = Layout(
        nnodes=options.nnodes,
        nproc_per_node=options.nproc_per_node,
        node_rank=options.node_rank,
        master_addr=options.master_addr,
        master_port=options.master_port,
    )
    return Supervisor(
        layout, command, grace_s=options.grace_s, stop_s=options.stop_s, environ=environ
    )


def main(argv: Sequence[str] | None = None) -> int:
    return parse(sys.argv[1:] if argv is None else argv).run()


if __name__ == "__main__":
    sys.exit(main())
