"""The tiny `gpt` job the stack's end-to-end tests and the chaos benchmark train: seconds on a CPU.

Its corpus is named: the default (the running interpreter's stdlib) differs between the stack's
trainers (the runtime's interpreter under a root server, worker/launchers/runtime.py) and a
reference run in the test's own interpreter, which would then read other text. It is the
trainers' own view of the `api` package: the same bytes where the runtime had to copy them.
"""

from __future__ import annotations

from typing import Any

from devstack.confinement import reachable_package

TINY_GPT: dict[str, Any] = {
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 4,
    "block_size": 32,
    "corpus": str(reachable_package("api")),
    "corpus_bytes": 200_000,
}
