"""Every random number generator a training step can draw from, captured and restored together.

numpy's state is kept as a tensor rather than an ndarray so that checkpoints load with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture() -> dict[str, Any]:
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # legacy=True is the tuple form; the stub also allows a dict
    kind, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            torch.cuda.set_rng_state(cuda[torch.cuda.current_device() % len(cuda)])


def _as_tuples(value: Any) -> Any:
    # random.setstate insists on tuples; a round trip through a checkpoint may give lists.
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value
