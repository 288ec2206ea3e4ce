"""Trainer benchmarks: `python -m benchmarks.trainer` writes benchmarks/results/trainer.json.

- overhead: trainer steps/s vs a hand-written PyTorch loop (same model, data, batch, optimizer,
  clipping and schedule), repetitions interleaved so that machine noise hits both alike. On a
  shared machine wall time mostly measures the neighbours, so `overhead_ratio` is computed from
  CPU time (one intra-op thread, so CPU time is work, not spinning); the wall-time ratio is
  reported beside it. Goal: overhead_ratio >= 0.97 (checkpointing off).
- checkpoint stall per save, asynchronous vs synchronous, to a real S3 server (SeaweedFS).
  Goal: stall_ratio < 0.10.
- upload throughput of the checkpoint store vs a raw boto3 `upload_file` of the same bytes to
  the same server. Goal: upload_ratio >= 0.8.
- resume time: process start to the first resumed step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from devstack.s3server import S3Server, start_s3_server
from gpujobs.runtime import RunConfig
from gpujobs.spec import TrainerSpec
from trainer.checkpoint import Checkpointer, open_store
from trainer.loop import Trainer
from trainer.optimization import make_optimizer, make_scheduler
from trainer.rng import seed_everything
from trainer.workloads import load_workload

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "trainer.json"
MiB = 1024 * 1024

OVERHEAD_ARGS = {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 128}
STALL_ARGS = {"n_layer": 6, "n_head": 8, "n_embd": 384, "block_size": 128}


def spec(steps: int, args: dict[str, Any], **extra: Any) -> TrainerSpec:
    return TrainerSpec.model_validate(
        {
            "workload": "gpt",
            "steps": steps,
            "batch_size": 8,
            "amp": "off",
            "dataloader": {"num_workers": 0},
            "checkpoint": {"every_steps": 10_000_000},
            "args": args,
            **extra,
        }
    )


def bare_loop_steps_per_s(steps: int) -> tuple[float, float]:
    """The loop a careful person writes by hand, with nothing else."""
    seed_everything(0)
    workload = load_workload("gpt", OVERHEAD_ARGS)
    model = workload.model
    optimizer = make_optimizer(model, 3e-4, torch.device("cpu"))
    scheduler = make_scheduler(optimizer, steps)
    loader = torch.utils.data.DataLoader(
        workload.train_dataset, batch_size=8, shuffle=True, drop_last=True
    )
    batches = iter(loader)
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = workload.loss_fn(model, next(batches))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    loss.item()
    return steps / (time.perf_counter() - start), steps / (time.process_time() - start_cpu)


def trainer_steps_per_s(steps: int, workdir: Path) -> tuple[float, float]:
    config = RunConfig(
        trainer=spec(steps, OVERHEAD_ARGS),
        checkpoint_uri=str(workdir / f"overhead-{time.monotonic_ns()}"),
        progress_every_s=5.0,
    )
    result = Trainer(config, stdout=open(os.devnull, "w")).run()  # noqa: SIM115
    return result.steps_run / result.train_s, result.steps_run / result.train_cpu_s


def overhead(repetitions: int, steps: int, workdir: Path) -> dict[str, Any]:
    bare_loop_steps_per_s(3)  # warm-up: first-use allocations and kernel selection
    trainer_steps_per_s(3, workdir)
    bare, ours = [], []
    for _ in range(repetitions):
        bare.append(bare_loop_steps_per_s(steps))
        ours.append(trainer_steps_per_s(steps, workdir))
    wall = statistics.median(o[0] for o in ours) / statistics.median(b[0] for b in bare)
    cpu = statistics.median(o[1] for o in ours) / statistics.median(b[1] for b in bare)
    return {
        "steps": steps,
        "repetitions": repetitions,
        "intra_op_threads": torch.get_num_threads(),
        "bare_steps_per_s_wall": [b[0] for b in bare],
        "trainer_steps_per_s_wall": [o[0] for o in ours],
        "bare_steps_per_cpu_s": [b[1] for b in bare],
        "trainer_steps_per_cpu_s": [o[1] for o in ours],
        "wall_ratio": wall,
        "overhead_ratio": cpu,
    }


def training_state() -> tuple[dict[str, Any], int]:
    """A realistic checkpoint: a model and its AdamW state after one step."""
    seed_everything(0)
    workload = load_workload("gpt", STALL_ARGS)
    optimizer = make_optimizer(workload.model, 3e-4, torch.device("cpu"))
    x, y = workload.train_dataset[0]
    workload.loss_fn(workload.model, (x[None], y[None])).backward()
    optimizer.step()
    state = {"model": workload.model.state_dict(), "optimizer": optimizer.state_dict()}
    nbytes = sum(p.numel() * p.element_size() for p in workload.model.parameters()) * 3
    return state, nbytes


def checkpoint_stall(server: S3Server, repetitions: int) -> dict[str, Any]:
    state, nbytes = training_state()
    store = open_store("s3://bench/stall", endpoint_url=server.endpoint_url)
    writer = Checkpointer(store, rank=0, world_size=1, nonce="bench", keep_last=2)
    sync, asynchronous = [], []
    for i in range(repetitions):
        sync.append(writer.save(2 * i + 1, shared=state, part={}, wait=True))
        writer.wait()
        asynchronous.append(writer.save(2 * i + 2, shared=state, part={}, wait=False))
        writer.wait()
    return {
        "state_mib": nbytes / MiB,
        "sync_stall_s": sync,
        "async_stall_s": asynchronous,
        "stall_ratio": statistics.median(asynchronous) / statistics.median(sync),
    }


def upload_throughput(server: S3Server, size_mib: int, repetitions: int) -> dict[str, Any]:
    data = os.urandom(size_mib * MiB)
    store = open_store("s3://bench/upload", endpoint_url=server.endpoint_url)
    client = server.client()
    ours, raw = [], []
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        for i in range(repetitions):
            start = time.perf_counter()
            client.upload_file(f.name, "bench", f"raw/{i}")
            raw.append(size_mib / (time.perf_counter() - start))
            start = time.perf_counter()
            store.put(f"ours/{i}", data)
            ours.append(size_mib / (time.perf_counter() - start))
    return {
        "size_mib": size_mib,
        "store_mib_per_s": ours,
        "boto3_upload_file_mib_per_s": raw,
        "upload_ratio": statistics.median(ours) / statistics.median(raw),
    }


def resume_time(workdir: Path, repetitions: int) -> dict[str, Any]:
    """Seconds from `python -m trainer` starting to its first step after a resume."""
    uri = str(workdir / "resume")
    first = RunConfig(trainer=spec(20, OVERHEAD_ARGS), checkpoint_uri=uri)
    Trainer(first, stdout=open(os.devnull, "w")).run()  # noqa: SIM115
    times = []
    for i in range(repetitions):
        # One step more each time: steps are part of what a checkpoint computes, so the resume
        # must allow the change (without it the trainer refuses, exit 78, and reports no step).
        checkpoint = {"every_steps": 10_000_000, "allow_config_change": True}
        config = RunConfig(
            trainer=spec(21 + i, OVERHEAD_ARGS, checkpoint=checkpoint),
            checkpoint_uri=uri,
            progress_every_s=0.001,
        )
        path = workdir / f"resume-{i}.json"
        path.write_text(config.model_dump_json())
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "trainer", "--config", str(path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        elapsed = None
        for line in process.stdout:
            record = json.loads(line)
            if "event" not in record and record["step"] == 21 + i:
                elapsed = time.perf_counter() - start
        code = process.wait()
        assert elapsed is not None, f"the resumed run reported no step (exit {code})"
        times.append(elapsed)
    return {"process_start_to_first_resumed_step_s": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--upload-mib", type=int, default=128)
    options = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server = start_s3_server(workdir / "seaweedfs")
        os.environ.update(server.env())  # the checkpoint store reads credentials from here
        try:
            results = {
                "machine": {"cpus": os.cpu_count(), "torch": torch.__version__},
                "overhead": overhead(options.repetitions, options.steps, workdir),
                "checkpoint": checkpoint_stall(server, 3),
                "upload": upload_throughput(server, options.upload_mib, 3),
                "resume": resume_time(workdir, 2),
            }
        finally:
            server.stop()
    results["overhead_ratio"] = results["overhead"]["overhead_ratio"]
    results["stall_ratio"] = results["checkpoint"]["stall_ratio"]
    results["upload_ratio"] = results["upload"]["upload_ratio"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
