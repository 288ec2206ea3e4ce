"""The tiny `gpt` job the stack's end-to-end tests and the chaos benchmark train: seconds on a CPU.

Its corpus is named: the default (the running interpreter's stdlib) differs between the stack's
trainers (the bridge interpreter under a root server, worker/launchers/interpreter.py) and a
reference run in the test's own interpreter, which would then read other text.
"""

from __future__ import annotations

from typing import Any

from devstack.stack import ROOT

TINY_GPT: dict[str, Any] = {
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 4,
    "block_size": 32,
    "corpus": str(ROOT / "api"),
    "corpus_bytes": 200_000,
}
