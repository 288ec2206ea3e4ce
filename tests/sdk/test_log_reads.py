"""A huge log through the real API over HTTP: streamed a bounded chunk at a time (a 300 MB log
took the server from 0.18 to 2.6 GB with three readers, issue 22), and its end alone with
`tail`."""

from __future__ import annotations

import tracemalloc

from gpujobs.client import Client
from tests.conftest import job_body
from tests.sdk.server import LiveApi

MIB = 1024 * 1024


def test_a_huge_log_is_served_without_holding_it(gj: Client, api: LiveApi) -> None:
    size = 32 * MIB
    job = gj.submit(job_body("chatty"))
    api.finish_with_log(job.id, "step 1 loss 2.0 " * (size // 16))

    tracemalloc.start()  # the server's thread and this one
    try:
        received = sum(len(chunk) for chunk in gj.logs(job.id, follow=True))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert received > size
    assert peak < 4 * MIB, f"{peak} bytes held to serve a {size}-byte log"


def test_tail_reads_only_the_end(gj: Client, api: LiveApi) -> None:
    job = gj.submit(job_body("tailed"))
    api.finish_with_log(job.id, "".join(f"step {n}\n" for n in range(10_000)))

    text = gj.logs(job.id, tail=20)

    header, end = text.split("\n", 1)
    assert header.startswith("=== attempt 1:")
    assert end == "step 9998\nstep 9999\n"
    assert "".join(gj.logs(job.id, follow=True, tail=10)) == f"{header}\nstep 9999\n"
