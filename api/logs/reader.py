"""What the API asks of whatever reads attempts' logs (installed by the composition root).

A log is a trainer's output, so it is as large as the trainer makes it: a reader hands it over in
chunks of at most CHUNK_BYTES, from a byte offset to where the log ends at the time of the call,
never the whole log at once. A follower keeps the offset where it stopped and asks only for
what came after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

# What a chunk is, and how large, is the contract's: the launchers that read logs hold to it too.
from gpujobs.logs import CHUNK_BYTES, LogChunk

__all__ = ["CHUNK_BYTES", "LogChunk", "LogReader"]


class LogReader(Protocol):
    def __call__(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        """The attempt's log from byte `offset` (counted from the end when negative: -N is its
        last N bytes) to its current end, in chunks of at most CHUNK_BYTES; nothing when there
        is no log (yet)."""
        ...
