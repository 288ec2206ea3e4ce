"""Headless Debian chromium driven over the DevTools protocol: navigate, run script in the
page, wait for a condition, take a screenshot. Enough to click through the dashboard."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.sdk.server import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280


def chromium_command(profile: Path, *, height: int) -> list[str]:
    """Headless chromium with nothing of its own reaching the network, in its own profile."""
    assert CHROMIUM, "chromium is needed for the dashboard tests (apt-get install chromium)"
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--disable-quic",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{height}",
    ]


class PageError(AssertionError):
    pass


class Page:
    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self.ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=120))
            if message.get("id") != message_id:
                continue  # an event we did not subscribe to on purpose
            if "error" in message:
                raise PageError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def js(self, expression: str) -> Any:
        """The value of `expression` in the page (awaited when it is a promise)."""
        answer = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in answer:
            raise PageError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60) -> Any:
        """Polls `expression` until it is truthy; the test fails with the page's text if not."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                status = self.js("document.getElementById('status')?.textContent")
                raise PageError(f"timed out waiting for {expression!r}; status: {status!r}")
            time.sleep(0.1)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def screenshot(self, path: Path, *, height: int) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        time.sleep(0.3)  # let the page lay out at the new size
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


@contextmanager
def browser(profile: Path) -> Iterator[Page]:
    port = free_port()
    command = [
        *chromium_command(profile, height=1000),
        f"--remote-debugging-port={port}",
        "about:blank",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        socket = connect(_page_socket(port), max_size=None, open_timeout=30)
        with socket:
            page = Page(socket)
            page.call("Page.enable")
            yield page
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _page_socket(port: int) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("chromium's DevTools endpoint did not come up")
        time.sleep(0.2)
