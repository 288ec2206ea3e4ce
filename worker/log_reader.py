"""The launcher's logs as the API reads them (api.logs.reader), for the composition roots
(worker.api_app, worker.standalone, tests).

A launcher that reads its logs from an offset (Capability.LOG_OFFSET: the local launcher's
files) is read so, a bounded chunk at a time. A launcher that can only stream a log from its
start (Kubernetes: the pod log API has no byte offset) is read as a stream, a bounded chunk at a
time too, skipping what comes before the offset.

The launcher is built on the first log read, not at import: an API configured for Kubernetes
must start, and serve everything but logs, where no kubeconfig or in-cluster config is at hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from api.logs.reader import CHUNK_BYTES, LogChunk, LogReader
from api.settings import Settings, get_settings
from worker.launchers.base import Launcher, offset_logs
from worker.launchers.registry import make_launcher

logger = logging.getLogger(__name__)


def log_reader(launcher: Launcher) -> LogReader:
    reads = offset_logs(launcher)
    if reads is not None:
        return reads.read_log
    return _StreamedLogs(launcher)


class _StreamedLogs:
    """A launcher's `logs` text, as bytes from an offset. From the end (a negative offset), the
    log is streamed twice: once to learn its length, then to what is wanted."""

    def __init__(self, launcher: Launcher) -> None:
        self._launcher = launcher

    def __call__(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        if offset < 0:
            offset = max(0, sum(len(data) for data in self._bytes(handle)) + offset)
        position = 0
        for data in self._bytes(handle):
            end = position + len(data)
            if end > offset:
                yield LogChunk(start=max(position, offset), data=data[max(0, offset - position) :])
            position = end

    def _bytes(self, handle: str) -> Iterator[bytes]:
        for text in self._launcher.logs(handle):
            data = text.encode("utf-8", errors="replace")
            for start in range(0, len(data), CHUNK_BYTES):
                yield data[start : start + CHUNK_BYTES]


class LazyLogReader:
    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._reader: LogReader | None = None
        self._lock = threading.Lock()

    def __call__(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        with self._lock:
            if self._reader is None:
                try:
                    self._reader = log_reader(make_launcher(self._settings or get_settings()))
                except Exception as error:  # no cluster config yet: retried on the next read
                    logger.warning("cannot read logs: launcher not configured: %s", error)
                    note = f"[logs unavailable: the launcher is not configured: {error}]\n"
                    return iter([_note(note.encode(), at=offset)])
            reader = self._reader
        return reader(handle, offset=offset)


def _note(data: bytes, *, at: int) -> LogChunk:
    """Words of ours, not the log's: they end where the reader stands, so it does not move."""
    return LogChunk(start=max(at, 0) - len(data), data=data)
