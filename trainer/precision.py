"""Mixed precision: autocast dtype and gradient scaler for the job's `amp` setting."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from gpujobs.spec import AmpDtype

log = logging.getLogger(__name__)


@dataclass
class Precision:
    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler
    note: str | None = None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
            return
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            yield


def choose_precision(amp: AmpDtype, device: torch.device) -> Precision:
    """bf16 needs no loss scaling; fp16 gets a GradScaler (CPU autocast supports fp16 as well).
    A GPU without bf16 falls back to fp16 rather than failing."""
    kind = device.type
    note = None
    if amp == AmpDtype.BF16 and kind == "cuda" and not torch.cuda.is_bf16_supported():
        note = "this GPU has no bf16; using fp16 with loss scaling"
        log.warning(note)
        amp = AmpDtype.FP16
    if amp == AmpDtype.OFF:
        return Precision(kind, None, torch.amp.GradScaler(kind, enabled=False))
    if amp == AmpDtype.BF16:
        return Precision(kind, torch.bfloat16, torch.amp.GradScaler(kind, enabled=False), note)
    return Precision(kind, torch.float16, torch.amp.GradScaler(kind), note)
