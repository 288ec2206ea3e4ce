"""The GPU acceptance script never rots: `make test` runs its dry run (every step, tiny sizes, on
the CPU) and checks what the GPU run would check. Whether it has run on a GPU is the README's row
(benchmarks/results/gpu.json)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.gpu_e2e import DRY, GPU, flops_per_token, mfu, peak_bf16
from benchmarks.gpu_service import longest_spot_window_s, outlasting_steps

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_dry_run_takes_every_step_and_what_it_checks_holds(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [str(ROOT / "benchmarks" / "gpu_e2e.sh"), "--dry-run", "--out", str(out)],
        capture_output=True, text=True, timeout=840, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["dry_run"] is True
    for part in ("table", "curves", "speed", "cuda_tests", "resume", "service"):
        assert "error" not in result[part], (part, result[part])
    assert {(run["amp"], run["grad_checkpointing"]) for run in result["table"]["runs"]} == {
        (amp, ckpt) for amp in ("off", "bf16", "fp16") for ckpt in (False, True)
    }
    assert set(result["curves"]["final_loss"]) == {"off", "bf16", "fp16"}
    # On a CPU every resume is bitwise exact, deterministic or not, bf16 or fp16 with its scaler,
    # its trainers on one thread (benchmarks.gpu_e2e.Sizes.resume_threads).
    assert all(case["bitwise_equal"] for case in result["resume"]["cases"])
    assert {case["amp"] for case in result["resume"]["cases"]} == {"bf16", "fp16"}
    service = result["service"]
    assert service["all_succeeded"], service
    assert service["spot_preemptions"] >= 1, service
    # the job was sized to need more time than any window of spot gave it
    work_s = service["steps"] / service["measured_steps_per_s"]
    assert work_s > longest_spot_window_s(DRY.spot_trace), service
    assert all(v["bitwise_equal"] for v in service["weights"].values()), service["weights"]


def test_mfu_follows_nanogpts_formula() -> None:
    model = GPU.model
    n_params = 124_000_000
    per_token = flops_per_token(
        n_params, n_layer=model["n_layer"], n_head=model["n_head"], n_embd=model["n_embd"],
        block=model["block_size"],
    )  # fmt: skip
    # 6N + 12 * L * H * Q * T for GPT-2 small: 744M + 12 * 12 * 768 * 1024.
    assert per_token == 6 * n_params + 12 * 12 * 768 * 1024
    assert mfu(500_000, per_token, peak_bf16("NVIDIA H200")) == pytest.approx(
        500_000 * per_token / 989.4e12
    )
    assert mfu(500_000, per_token, peak_bf16("cpu")) is None


def test_a_job_sized_to_outlast_the_spot_windows_needs_more_than_the_longest() -> None:
    trace = (1, 1, 0) + (1, 1, 1, 1, 0) + (1,) * 50
    # the open tail is not a window: no notice ends it
    assert longest_spot_window_s(trace) == 40.0
    assert outlasting_steps(trace, steps_per_s=12.5) == 1500  # 120 s of work
    assert outlasting_steps((1, 0), steps_per_s=0.001) == 1
    assert longest_spot_window_s(DRY.spot_trace) > 0  # the dry run's market gives notices
