"""An attempt's log as it travels from whoever holds it (a launcher) to the API, which serves it.

A log is a trainer's output, so it is as large as the trainer makes it: it is handed over in
chunks of at most CHUNK_BYTES, each with its byte offset in the log, never the whole log at once.
Both sides hold to it: the launchers (worker.launchers.base.OffsetLogs) and the API's reader
(api.logs.reader.LogReader).
"""

from __future__ import annotations

from typing import NamedTuple

CHUNK_BYTES = 64 * 1024


class LogChunk(NamedTuple):
    start: int  # the byte offset of `data` in the attempt's log
    data: bytes
