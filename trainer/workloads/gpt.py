"""`gpt`: a small GPT-style byte-level language model trained on text found offline.

The corpus defaults to the .py files of Python's own standard library (sorted by path, so every
machine with the same Python reads the same bytes; another Python, such as the local launcher's
bridge interpreter under a root server, reads other bytes); `corpus` points it at other files or
directories (several joined with the OS path separator).
"""

from __future__ import annotations

import math
import os
import sysconfig
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import Dataset

from gpujobs.workloads import BYTE_VOCAB
from gpujobs.workloads import GPT as DECLARED
from trainer.config import ConfigError
from trainer.workloads import Workload

VOCAB = BYTE_VOCAB


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(
        self, *, block_size: int, n_layer: int, n_head: int, n_embd: int, dropout: float
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.grad_checkpointing = False
        self.wte = nn.Embedding(VOCAB, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.lm_head(self.ln_f(x))


class ByteChunks(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of the corpus: item i predicts bytes i*T+1 .. i*T+T."""

    def __init__(self, data: torch.Tensor, block_size: int) -> None:
        self.data = data
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i * self.block_size : (i + 1) * self.block_size + 1].long()
        return chunk[:-1], chunk[1:]


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(roots: list[Path], pattern: str) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            found = (p for p in root.rglob(pattern) if p.is_file())
            files.extend(sorted(p for p in found if "site-packages" not in p.parts))
        else:
            raise ConfigError(f"workload 'gpt': corpus path {root} does not exist")
    return files


def read_corpus(files: list[Path], limit: int) -> torch.Tensor:
    parts: list[bytes] = []
    total = 0
    for path in files:
        data = path.read_bytes()[: limit - total]
        parts.append(data)
        total += len(data)
        if total >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def build(args: dict[str, Any]) -> Workload:
    """Options, their defaults and bounds: `gpujobs.workloads.GPT` (what the API checks too)."""
    opts = DECLARED.parse(args)
    block_size: int = opts["block_size"]
    n_layer: int = opts["n_layer"]
    n_head: int = opts["n_head"]
    n_embd: int = opts["n_embd"]
    dropout: float = opts["dropout"]
    corpus: str = opts["corpus"]
    pattern: str = opts["corpus_glob"]
    limit: int = opts["corpus_bytes"]
    roots = [Path(p) for p in corpus.split(os.pathsep) if p] if corpus else [stdlib_dir()]
    data = read_corpus(corpus_files(roots, pattern), limit)
    if len(data) <= block_size:
        raise ConfigError(f"workload 'gpt': the corpus has only {len(data)} bytes")
    model = GPT(
        block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd, dropout=dropout
    )

    def set_grad_checkpointing(on: bool) -> None:
        model.grad_checkpointing = on

    return Workload(
        model=model,
        train_dataset=ByteChunks(data, block_size),
        loss_fn=loss_fn,
        set_grad_checkpointing=set_grad_checkpointing,
    )
