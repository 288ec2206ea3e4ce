"""The API reads a Kubernetes attempt's log (which the pod log API streams from its start) from a
byte offset, and its end with a negative one, as it reads a local attempt's."""

from __future__ import annotations

from collections.abc import Callable

import kmock

from api.logs.reader import CHUNK_BYTES, LogChunk
from tests.launchers.conftest import Cluster
from worker.launchers.base import LaunchRequest
from worker.log_reader import log_reader

RequestFactory = Callable[..., LaunchRequest]


def test_a_pod_log_is_read_from_an_offset_in_bounded_chunks(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.start_pods(handle)
    long_line = b"x" * (2 * CHUNK_BYTES + 5)
    cluster.emulator["get", kmock.subresource("log")] << b"step 1\n" + long_line + b"\nstep 2\n"
    reader = log_reader(launcher)
    text = b"step 1\n" + long_line + b"\nstep 2\n"  # the log as the pod wrote it, line ends too

    whole = list(reader(handle))
    assert b"".join(c.data for c in whole) == text
    assert max(len(c.data) for c in whole) <= CHUNK_BYTES
    assert [c.start for c in whole] == [0, 7, 7 + CHUNK_BYTES, 7 + 2 * CHUNK_BYTES, len(text) - 7]
    assert list(reader(handle, offset=len(text) - 9)) == [
        LogChunk(len(text) - 9, b"x\n"),
        LogChunk(len(text) - 7, b"step 2\n"),
    ]
    assert list(reader(handle, offset=-4)) == [LogChunk(len(text) - 4, b"p 2\n")]
    assert list(reader(handle, offset=len(text))) == []
