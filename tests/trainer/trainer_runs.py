"""Running the trainer in tests: configs, a subprocess (alone or under torchrun) whose JSON lines
can be waited on, and interruption by signal at a chosen step."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

TINY_GPT = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "corpus_bytes": 200_000}


def run_config(checkpoint_uri: str, **trainer: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workload": "gpt",
        "steps": 20,
        "batch_size": 4,
        "amp": "off",
        "dataloader": {"num_workers": 0},
        "checkpoint": {"every_steps": 5, "keep_last": 3},
        "args": dict(TINY_GPT),
    }
    spec.update(trainer)
    return {"trainer": spec, "checkpoint_uri": checkpoint_uri, "progress_every_s": 0.001}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TrainerProcess:
    """`python -m trainer` (nproc 1) or `torchrun --nproc_per_node=N -m trainer`."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        *,
        nproc: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"config-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(config))
        # Every process of this run has it in its command line: torchrun, each rank (torchrun
        # starts them in sessions of their own) and their forked DataLoader workers.
        self.marker = str(path)
        if nproc == 1:
            command = [sys.executable, "-m", "trainer", "--config", str(path)]
        else:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nproc_per_node={nproc}",
                "--master_addr=127.0.0.1",
                f"--master_port={free_port()}",
                "-m",
                "trainer",
                "--config",
                str(path),
            ]
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.records: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr_path = workdir / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    self._queue.put(json.loads(line))
        self._queue.put(None)

    def _drain(self, timeout: float) -> bool:
        try:
            record = self._queue.get(timeout=timeout)
        except queue.Empty:
            return True
        if record is None:
            return False
        self.records.append(record)
        return True

    def wait_for_step(self, step: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(r.get("step", -1) >= step and "event" not in r for r in self.records):
            if time.monotonic() > deadline:
                raise TimeoutError(f"trainer did not reach step {step}: {self.stderr()}")
            if not self._drain(0.5):
                raise RuntimeError(f"trainer exited before step {step}: {self.stderr()}")

    def processes(self) -> list[int]:
        """The run's live processes: the entrypoint's descendants and whatever else carries the
        run's config in its command line (a rank whose torchrun is gone)."""
        parents: dict[int, int] = {}
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone meanwhile
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if state == "Z":
                continue  # dead, waiting to be reaped
            parents[int(entry.name)] = int(ppid)
            if self.marker in cmdline:
                found.add(int(entry.name))
        tree = {self.process.pid} if self.process.pid in parents else set()
        grew = True
        while grew:
            children = {pid for pid, ppid in parents.items() if ppid in tree} - tree
            tree |= children
            grew = bool(children)
        return sorted(found | tree)

    def kill_all(self, timeout: float = 30.0) -> None:
        """SIGKILL to every process of the run, until none is left (a machine lost at once)."""
        deadline = time.monotonic() + timeout
        while pids := self.processes():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes of the run survive SIGKILL: {pids}")
            time.sleep(0.05)

    def interrupt(self, sig: signal.Signals) -> None:
        if sig == signal.SIGKILL:
            self.kill_all()
        else:
            self.process.send_signal(sig)  # like the cloud: the notice reaches the entrypoint

    def wait(self, timeout: float = 180.0) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        self._reader.join(timeout=10)
        while self._drain(0):
            pass
        self._stderr.close()
        return code

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-4000:]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"weights differ: {different}"


def run_in_process(config: dict[str, Any], **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Run the trainer in this process; returns its RunResult and its JSON lines."""
    import io

    from gpujobs.runtime import RunConfig
    from trainer.loop import Trainer

    out = io.StringIO()
    result = Trainer(RunConfig.model_validate(config), stdout=out, **kwargs).run()
    records = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return result, records
