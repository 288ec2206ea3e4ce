"""GPU acceptance: what gpujobs does on one CUDA GPU, in one command, in about 6 minutes.

    benchmarks/gpu_e2e.sh                  # on a machine with a CUDA GPU, as root (as `make run`)
    benchmarks/gpu_e2e.sh --dry-run        # the same steps at tiny sizes on a CPU (`make test`)

Parts, each timed, each written to the results even when another fails:
  table      GPT-124M (12 x 768, batch 16 x 1024): step time, tokens/s, peak memory and loss for
             amp off (TF32) / bf16 / fp16, gradient checkpointing off / on
  curves     loss curves of TF32, bf16 and fp16 over 1,000 steps on the same data; goal: bf16's
             final loss (mean of the last 50 steps) within 1% of TF32's
  speed      bf16 with `torch.compile`: step time and model FLOPs utilisation against the GPU's
             peak dense bf16 rate (nanoGPT's formula); goal: MFU >= 50% on an H100/H200
  cuda_tests the suite's CUDA tests (`pytest -m cuda`)
  resume     the trainer alone, bf16 and fp16 (with its scaler), deterministic on and off: a run
             preempted (SIGTERM, checkpoint, resume) against an uninterrupted one, tensor by tensor
  service    the embedded service as root (`python -m worker.standalone`, what `make run` starts)
             with a simulated spot market replaying a notice a minute: two jobs on on-demand and
             one on spot, all SUCCEEDED, the spot one preempted at least once, and the final
             weights compared (the two uninterrupted runs with each other and with the preempted)

Writes benchmarks/results/gpu.json (`--out` elsewhere; a dry run never writes the results file).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.gpu_resume import part_resume
from benchmarks.gpu_service import part_service

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# Peak dense bf16 tensor-core rates, FLOP/s, by the name torch reports (datasheet figures).
PEAK_BF16 = {
    "H200": 989.4e12,
    "H100 SXM": 989.4e12,
    "H100 80GB HBM3": 989.4e12,
    "H100 PCIe": 756.0e12,
    "H100 NVL": 835.0e12,
    "A100": 312.0e12,
    "L40S": 362.1e12,
    "L4": 121.0e12,
}
MFU_GOAL = 0.50
AMP_GOAL = 0.01  # bf16's final loss within 1% of TF32's


@dataclass(frozen=True)
class Sizes:
    model: dict[str, int]
    batch: int
    table_steps: int
    curve_steps: int
    speed_steps: int
    resume_model: dict[str, int]
    resume_steps: int
    resume_cases: tuple[tuple[str, bool], ...]  # (amp, deterministic)
    # OMP_NUM_THREADS of the resume part's trainers; None: the machine's. On a CPU torch splits
    # a reduction across its intra-op threads differently from run to run: two uninterrupted
    # fp16 runs of the dry size on two cores ended with different weights 3 times in 10 (fp32
    # once in 6), never in 12 with one thread, as the trainer's own tests run it
    # (tests/trainer/trainer_runs.py). A GPU's kernels do not use them.
    resume_threads: int | None
    # None: sized from this machine's measured trainer rate, so the spot job outlasts every
    # window of spot in `spot_trace` and meets a notice whatever the machine's speed
    service_steps: int | None
    spot_trace: tuple[int, ...]  # the spot market's availability, a tick per 10 s of wall time
    compile: bool


GPU = Sizes(
    model={"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024},
    batch=16,
    table_steps=10,
    curve_steps=1000,
    speed_steps=30,
    resume_model={"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256},
    resume_steps=300,
    resume_cases=(("bf16", True), ("bf16", False), ("fp16", True), ("fp16", False)),
    resume_threads=None,
    service_steps=3000,
    spot_trace=(1, 1, 1, 1, 1, 0) * 30 + (1,) * 360,  # a notice a minute for half an hour
    compile=True,
)
DRY = Sizes(
    model={"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
    batch=4,
    table_steps=2,
    curve_steps=20,
    speed_steps=3,
    resume_model={"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
    resume_steps=30,
    resume_cases=(("bf16", True), ("fp16", False)),  # each code path once
    resume_threads=1,
    # A fixed step count met no notice on a fast machine (CI, once), or met them all before a
    # slow start: notices every 40 s for 40 minutes, and a job with three times the work of the
    # longest window of spot (benchmarks/gpu_service.py), so it must be preempted.
    service_steps=None,
    spot_trace=(1, 1, 1, 0) * 60 + (1,) * 360,
    compile=False,  # inductor's CPU build of even a tiny model takes minutes on 2 cores
)


def flops_per_token(n_params: int, *, n_layer: int, n_head: int, n_embd: int, block: int) -> float:
    """Training FLOPs per token (forward and backward), nanoGPT's estimate (PaLM, appendix B)."""
    return 6 * n_params + 12 * n_layer * n_head * (n_embd // n_head) * block


def mfu(tokens_per_s: float, flops: float, peak: float | None) -> float | None:
    return None if not peak else tokens_per_s * flops / peak


def peak_bf16(device_name: str) -> float | None:
    return next((rate for name, rate in PEAK_BF16.items() if name in device_name), None)


# -- training steps in this process (table, curves, speed) --------------------------------------


def _trainer(sizes: Sizes, *, amp: str, checkpointing: bool = False, compile: bool = False) -> Any:
    import torch

    from gpujobs.spec import AmpDtype
    from trainer.optimization import make_optimizer
    from trainer.precision import choose_precision
    from trainer.rng import seed_everything
    from trainer.workloads import load_workload

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seed_everything(0)
    workload = load_workload("gpt", {**sizes.model, "corpus_bytes": 4_000_000})
    if checkpointing and workload.set_grad_checkpointing is not None:
        workload.set_grad_checkpointing(True)
    model = workload.model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    train: Any = torch.compile(model) if compile else model
    optimizer = make_optimizer(model, 3e-4, device)
    precision = choose_precision(AmpDtype(amp), device)
    generator = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(
        workload.train_dataset, batch_size=sizes.batch, shuffle=True, drop_last=True,
        num_workers=2 if device.type == "cuda" else 0, pin_memory=device.type == "cuda",
        generator=generator,
    )  # fmt: skip

    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    stream = batches()

    def step() -> float:
        x, y = (t.to(device, non_blocking=True) for t in next(stream))
        with precision.autocast():
            loss = workload.loss_fn(train, (x, y))
        precision.scaler.scale(loss).backward()
        precision.scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        precision.scaler.step(optimizer)
        precision.scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step, device, n_params


def _timed(step: Callable[[], float], device: Any, steps: int) -> tuple[float, float]:
    import torch

    for _ in range(3):  # warm-up: allocator, kernels (a compile), workers
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = 0.0
    for _ in range(steps):
        loss = step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps, loss


def _peak_gib(device: Any) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def _amps(device_type: str) -> tuple[str, ...]:
    return ("off", "bf16", "fp16")


def part_table(sizes: Sizes) -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    runs = []
    for amp in _amps("any"):
        for checkpointing in (False, True):
            step, device, _ = _trainer(sizes, amp=amp, checkpointing=checkpointing)
            seconds, loss = _timed(step, device, sizes.table_steps)
            runs.append(
                {
                    "amp": amp,
                    "grad_checkpointing": checkpointing,
                    "step_ms": round(1000 * seconds, 2),
                    "tokens_per_s": round(sizes.batch * sizes.model["block_size"] / seconds),
                    "peak_memory_gib": _peak_gib(device),
                    "loss": round(loss, 4),
                }
            )
            _free()
    return {"runs": runs}


def part_curves(sizes: Sizes) -> dict[str, Any]:
    curves: dict[str, list[float]] = {}
    for amp in _amps("any"):
        step, _, _ = _trainer(sizes, amp=amp)
        curves[amp] = [step() for _ in range(sizes.curve_steps)]
        _free()
    tail = max(1, min(50, sizes.curve_steps // 4))
    final = {amp: sum(losses[-tail:]) / tail for amp, losses in curves.items()}
    gap = {amp: final[amp] / final["off"] - 1 for amp in ("bf16", "fp16")}
    every = max(1, sizes.curve_steps // 100)
    return {
        "steps": sizes.curve_steps,
        "final_loss_mean_of_last": tail,
        "final_loss": {amp: round(v, 4) for amp, v in final.items()},
        "vs_tf32": {amp: round(v, 4) for amp, v in gap.items()},
        "goal_bf16_within": AMP_GOAL,
        "goal_met": abs(gap["bf16"]) <= AMP_GOAL,
        "curves_every": every,
        "curves": {amp: [round(v, 4) for v in losses[::every]] for amp, losses in curves.items()},
    }


def part_speed(sizes: Sizes) -> dict[str, Any]:
    import torch

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor()
    peak = peak_bf16(name) if torch.cuda.is_available() else None
    out: dict[str, Any] = {"device": name, "peak_bf16_flops": peak, "runs": []}
    for compiled in sorted({False, sizes.compile}):
        step, device, n_params = _trainer(sizes, amp="bf16", compile=compiled)
        started = time.perf_counter()
        seconds, _ = _timed(step, device, sizes.speed_steps)
        m = sizes.model
        flops = flops_per_token(
            n_params, n_layer=m["n_layer"], n_head=m["n_head"], n_embd=m["n_embd"],
            block=m["block_size"],
        )  # fmt: skip
        tokens_per_s = sizes.batch * m["block_size"] / seconds
        value = mfu(tokens_per_s, flops, peak)
        out["runs"].append(
            {
                "compile": compiled,
                "step_ms": round(1000 * seconds, 2),
                "tokens_per_s": round(tokens_per_s),
                "mfu": None if value is None else round(value, 4),
                "wall_s_with_warmup": round(time.perf_counter() - started, 1),
            }
        )
        _free()
    best = [run["mfu"] for run in out["runs"] if run["mfu"] is not None]
    out["goal_mfu"] = MFU_GOAL
    out["goal_met"] = bool(best) and max(best) >= MFU_GOAL
    return out


def _free() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def part_cuda_tests(sizes: Sizes, *, dry_run: bool) -> dict[str, Any]:
    if dry_run:
        return {"skipped": "dry run: no CUDA"}
    # Only the files that hold CUDA tests: collecting the whole suite needs the dev tools
    # (kmock, schemathesis, ...) that a GPU machine set up for this run does not have.
    files = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.cuda" in path.read_text()
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return {"exit_code": done.returncode, "summary": done.stdout.strip().splitlines()[-1:]}


# -- the run --------------------------------------------------------------------------------------


def _part(results: dict[str, Any], name: str, run: Callable[[], dict[str, Any]]) -> None:
    started = time.perf_counter()
    try:
        results[name] = run()
    except Exception as error:  # a part that fails is a finding; the others still run
        results[name] = {"error": f"{type(error).__name__}: {error}"[:2000]}
        traceback.print_exc()
    results[name]["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"gpu_e2e: {name} done in {results[name]['wall_s']} s", file=sys.stderr, flush=True)


def run(
    *,
    dry_run: bool,
    only: list[str] | None = None,
    after_part: Callable[[dict[str, Any]], None] = lambda results: None,
) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not dry_run:
        return {"error": "no CUDA GPU visible to torch; --dry-run runs the steps on a CPU"}
    sizes = DRY if dry_run else GPU
    amp = "bf16" if cuda and torch.cuda.is_bf16_supported() else "off"
    results: dict[str, Any] = {
        "dry_run": dry_run,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "as_root": os.geteuid() == 0,
        "sizes": sizes.__dict__,
    }
    work = Path(tempfile.mkdtemp(prefix="gpujobs-gpu-e2e-"))
    work.chmod(0o711)  # the service's trainers (other uids) pass through to their directories
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "table": lambda: part_table(sizes),
        "curves": lambda: part_curves(sizes),
        "speed": lambda: part_speed(sizes),
        "cuda_tests": lambda: part_cuda_tests(sizes, dry_run=dry_run),
        "resume": lambda: part_resume(sizes, work=work / "resume"),
        "service": lambda: part_service(sizes, work=work / "service", amp=amp),
    }
    (work / "service").mkdir()
    started = time.perf_counter()
    for name, part in parts.items():
        if only is None or name in only:
            _part(results, name, part)
            after_part(results)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return results


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on a CPU")
    parser.add_argument("--only", action="append", help="run only this part (repeatable)")
    parser.add_argument("--out", type=Path, help="where to write the JSON")
    args = parser.parse_args()
    out = args.out or (None if args.dry_run else RESULTS / "gpu.json")

    def write(results: dict[str, Any]) -> None:
        # After every part, not only at the end: time on a lent GPU is short, and a run cut off
        # by its limit still leaves the parts it finished.
        if out is not None:
            out.write_text(json.dumps(_json_safe(results), indent=2) + "\n")

    results = _json_safe(run(dry_run=args.dry_run, only=args.only, after_part=write))
    write(results)
    print(json.dumps(results, indent=2))
    return 2 if "error" in results else 0


if __name__ == "__main__":
    raise SystemExit(main())
