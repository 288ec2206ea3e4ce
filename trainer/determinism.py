"""Deterministic kernels, for a resume that ends bitwise equal to an uninterrupted run on a GPU.

On a CPU the trainer's runs are bitwise exact already (every RNG, the sampler's position and
the loader's order are in the checkpoint). On a GPU some kernels are not: cuBLAS picks a
reduction split by workspace (fixed by CUBLAS_WORKSPACE_CONFIG, read when cuBLAS starts, so set
before the first CUDA matmul), cuDNN's autotuner picks by timing, and the memory-efficient and
cuDNN attention backward kernels accumulate with atomics. `apply(True)` fixes each and makes
torch raise on any other nondeterministic op rather than drift silently.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

import torch

CUBLAS_WORKSPACE = ":4096:8"


def apply(deterministic: bool, environ: MutableMapping[str, str] | None = None) -> None:
    if not deterministic:
        return
    env = os.environ if environ is None else environ
    env["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # Flash attention's backward is deterministic in torch, the math kernel always is; the
    # memory-efficient and cuDNN kernels are not.
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
