"""GPU acceptance, the `resume` part: the trainer alone as a process, preempted (SIGTERM,
checkpoint, resume) against an uninterrupted run, tensor by tensor (benchmarks/gpu_e2e.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.gpu_e2e import Sizes

ROOT = Path(__file__).resolve().parents[1]


def _run_config(directory: Path, sizes: Sizes, *, amp: str, deterministic: bool) -> Path:
    trainer = {
        "workload": "gpt",
        "steps": sizes.resume_steps,
        "batch_size": sizes.batch,
        "amp": amp,
        "seed": 3,
        "deterministic": deterministic,
        "dataloader": {"num_workers": 0},
        "checkpoint": {"every_steps": max(1, sizes.resume_steps // 6), "keep_last": 2},
        "args": {**sizes.resume_model, "dropout": 0.1, "corpus_bytes": 1_000_000},
    }
    path = directory / "config.json"
    directory.mkdir(parents=True, exist_ok=True)
    config = {"trainer": trainer, "checkpoint_uri": str(directory / "ckpt")}
    path.write_text(json.dumps(config | {"progress_every_s": 0.05}))
    return path


def _trainer_process(config: Path, *, threads: int | None, stop_at: int | None = None) -> int:
    """`python -m trainer`; with `stop_at`, SIGTERM (a spot notice) once it reports that step;
    `threads`: its OMP_NUM_THREADS (Sizes.resume_threads), None: the machine's."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", "--config", str(config)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if stop_at is not None and line.startswith("{"):
            record = json.loads(line)
            if record.get("step", 0) >= stop_at and "loss" in record:
                process.send_signal(signal.SIGTERM)
                stop_at = None
    return process.wait()


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    import torch

    differing = [name for name, tensor in a.items() if not torch.equal(tensor, b[name])]
    worst = max(
        (float((a[name].float() - b[name].float()).abs().max()) for name in differing), default=0.0
    )
    return {"bitwise_equal": not differing, "tensors_differing": len(differing), "max_abs": worst}


def _final(directory: Path) -> Any:
    from trainer.checkpoint import load_latest

    state = load_latest(str(directory / "ckpt"))
    return None if state is None else state.shared["model"]


def part_resume(sizes: Sizes, *, work: Path) -> dict[str, Any]:
    cases = []
    for amp, deterministic in sizes.resume_cases:
        label = f"{amp}-{'det' if deterministic else 'nondet'}"
        whole = _run_config(work / label / "whole", sizes, amp=amp, deterministic=deterministic)
        cut = _run_config(work / label / "cut", sizes, amp=amp, deterministic=deterministic)
        threads = sizes.resume_threads
        codes = [
            _trainer_process(whole, threads=threads),
            _trainer_process(cut, threads=threads, stop_at=sizes.resume_steps // 2),
            _trainer_process(cut, threads=threads),
        ]
        a, b = _final(whole.parent), _final(cut.parent)
        case: dict[str, Any] = {"amp": amp, "deterministic": deterministic, "exits": codes}
        case |= compare(a, b) if a is not None and b is not None else {"error": "no weights"}
        cases.append(case)
    held = all(c.get("bitwise_equal") for c in cases if c["deterministic"])
    return {"steps": sizes.resume_steps, "cases": cases, "deterministic_bitwise_equal": held}
