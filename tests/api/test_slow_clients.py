"""Slow and idle clients cost the server nothing it cannot spare (issue 36, attack 1).

Twenty connections that sent the headers of a POST and one byte of its body, then held, took
every admission place (taken before the body was read) for as long as they liked: every other
request got 503 for the two minutes tried. Connections that sent nothing, or half a request
line, were never closed either. Each attack runs here against the real embedded service on
loopback (tests.api.load_server), with its timeouts shortened by settings.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import slow_clients
from tests.api.test_load import Server, start_server, stop_server

TIMEOUT_S = 3  # the header and body timeouts the server is given here


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Server]:
    running = start_server(
        tmp_path,
        "",
        budget_usd=None,
        GPUJOBS_API_HEADER_TIMEOUT_S=str(TIMEOUT_S),
        GPUJOBS_API_BODY_TIMEOUT_S=str(TIMEOUT_S),
        # Every socket below comes from 127.0.0.1, as the test's own requests do: the cap on
        # connections per client has a test of its own.
        GPUJOBS_API_CONNECTIONS_PER_CLIENT="400",
    )
    yield running
    stop_server(running)


def test_slow_and_idle_clients_do_not_stop_other_requests(guarded: Server) -> None:
    server = guarded
    held = slow_clients.hold(server)
    try:
        # Other requests are answered while every slow socket is held.
        with httpx.Client(base_url=server.url, timeout=8) as client:
            assert client.get("/healthz").status_code == 200
            listed = client.get("/v1/jobs", headers=server.auth)
            assert listed.status_code == 200, listed.text
            budget = client.get("/v1/budget", headers=server.auth)
            assert budget.status_code == 200, budget.text
        # And the server closes every slow socket within its timeout (here well within the
        # deadline).
        outcomes = slow_clients.how_closed(held, within_s=TIMEOUT_S + 20)
        assert outcomes == slow_clients.CLOSED_AS, outcomes
        # Nothing of the slow requests was kept: no job was created from a partial body.
        with httpx.Client(base_url=server.url, timeout=8) as client:
            assert client.get("/v1/jobs", headers=server.auth).json()["items"] == []
    finally:
        slow_clients.release(held)


def test_one_client_holds_at_most_its_share_of_connections(tmp_path: Path) -> None:
    running = start_server(
        tmp_path,
        "",
        budget_usd=None,
        GPUJOBS_API_CONNECTIONS_PER_CLIENT="5",
        GPUJOBS_API_HEADER_TIMEOUT_S="60",
    )
    try:
        idle = [slow_clients.connect(running) for _ in range(5)]
        try:
            # The sixth connection of the same address is answered at once and closed.
            refused = httpx.get(running.url + "/healthz", timeout=8)
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"].isdigit()
        finally:
            for sock in idle:
                sock.close()
        # Closed connections give their places back.
        answered = []
        for _ in range(50):
            with contextlib.suppress(httpx.HTTPError):
                answered.append(httpx.get(running.url + "/healthz", timeout=8).status_code)
                if answered[-1] == 200:
                    break
            time.sleep(0.1)
        assert answered[-1:] == [200], answered
    finally:
        stop_server(running)


def test_a_forwarded_for_header_from_an_untrusted_peer_is_not_believed(tmp_path: Path) -> None:
    """A local process (a trainer) wrote another address into the access log with one header;
    forwarded headers are believed only from GPUJOBS_TRUSTED_PROXIES (none by default)."""
    forged = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    for trusted, seen in (("[]", "127.0.0.1:"), ('["127.0.0.1"]', "203.0.113.9:")):
        running = start_server(
            tmp_path,
            "",
            budget_usd=None,
            GPUJOBS_TRUSTED_PROXIES=trusted,
            GPUJOBS_TEST_LOG_LEVEL="info",
        )
        try:
            marker = f"/healthz?probe={len(trusted)}"
            assert httpx.get(running.url + marker, headers=forged).status_code == 200
            lines = []
            for _ in range(50):
                lines = [line for line in running.log.read_text().splitlines() if marker in line]
                if lines:
                    break
                time.sleep(0.1)
            assert len(lines) == 1, lines
            assert f"{seen}" in lines[0], lines
        finally:
            stop_server(running)
