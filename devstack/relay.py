"""A TCP relay from the local cluster's node address to a service on loopback.

Pods reach this machine at the node's address (the pod bridge's gateway); the test services
(the API, SeaweedFS) listen on 127.0.0.1 only. A relay on the node address, same port, lets
pods reach them without binding any service to an address outside this machine's own.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class Relay:
    """Accepts on (host, port) and pipes each connection to (127.0.0.1, target_port)."""

    def __init__(self, host: str, port: int, target_port: int | None = None) -> None:
        self.host, self.port = host, port
        self.target_port = target_port if target_port is not None else port
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.settimeout(0.5)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with client, upstream, selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not self._stopping.is_set():
                for key, _ in selector.select(timeout=0.5):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        # Half-close: pass the end of one direction on, keep the other open.
                        with contextlib.suppress(OSError):
                            key.data.shutdown(socket.SHUT_WR)
                        selector.unregister(source)
                        if not selector.get_map():
                            return
                        continue
                    try:
                        key.data.sendall(data)
                    except OSError:
                        return

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()
        self._thread.join(timeout=5)
