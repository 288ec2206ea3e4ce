#!/usr/bin/env bash
# GPU check for the trainer's GPT workload: step time and peak memory with amp off/bf16/fp16 and
# gradient checkpointing off/on, on one CUDA GPU. Prints one JSON document on stdout.
#   benchmarks/gpu_check.sh                       # from anywhere; PYTHON=... to pick the interpreter
#   STEPS=20 BATCH=16 N_LAYER=12 N_EMBD=768 BLOCK=1024 benchmarks/gpu_check.sh
# Without CUDA it prints {"error": ...} and exits 2. Takes about a minute on an H100/H200.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export STEPS="${STEPS:-20}" BATCH="${BATCH:-16}" N_LAYER="${N_LAYER:-12}" N_EMBD="${N_EMBD:-768}"
export N_HEAD="${N_HEAD:-12}" BLOCK="${BLOCK:-1024}"
exec "$PYTHON" - <<'PY'
import json
import os
import sys
import time

import torch

if not torch.cuda.is_available():
    print(json.dumps({"error": "no CUDA GPU visible to torch", "torch": torch.__version__}))
    sys.exit(2)

from gpujobs.spec import AmpDtype
from trainer.optimization import make_optimizer
from trainer.precision import choose_precision
from trainer.rng import seed_everything
from trainer.workloads import load_workload

steps, batch = int(os.environ["STEPS"]), int(os.environ["BATCH"])
args = {
    "n_layer": int(os.environ["N_LAYER"]),
    "n_embd": int(os.environ["N_EMBD"]),
    "n_head": int(os.environ["N_HEAD"]),
    "block_size": int(os.environ["BLOCK"]),
    "corpus_bytes": 4_000_000,
}
device = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def measure(amp: str, checkpointing: bool) -> dict:
    seed_everything(0)
    workload = load_workload("gpt", args)
    workload.set_grad_checkpointing(checkpointing)
    model = workload.model.to(device)
    optimizer = make_optimizer(model, 3e-4, device)
    precision = choose_precision(AmpDtype(amp), device)
    scaler = precision.scaler
    loader = torch.utils.data.DataLoader(
        workload.train_dataset, batch_size=batch, shuffle=True, drop_last=True,
        num_workers=2, pin_memory=True,
    )
    batches = iter(loader)

    def step() -> torch.Tensor:
        x, y = (t.to(device, non_blocking=True) for t in next(batches))
        with precision.autocast():
            loss = workload.loss_fn(model, (x, y))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):  # warm-up: allocator, kernels, workers
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {
        "amp": amp,
        "grad_checkpointing": checkpointing,
        "step_ms": 1000 * elapsed / steps,
        "tokens_per_s": steps * batch * args["block_size"] / elapsed,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "final_loss": float(loss.detach()),
    }
    del model, optimizer, loader, batches
    torch.cuda.empty_cache()
    return result


runs = []
for amp in ("off", "bf16", "fp16"):
    for checkpointing in (False, True):
        try:
            runs.append(measure(amp, checkpointing))
        except torch.OutOfMemoryError as exc:
            runs.append({"amp": amp, "grad_checkpointing": checkpointing, "error": str(exc)[:200]})
            torch.cuda.empty_cache()
print(json.dumps({
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "config": {"steps": steps, "batch_size": batch, **args},
    "runs": runs,
}, indent=2))
PY
