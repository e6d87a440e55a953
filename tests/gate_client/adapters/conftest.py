"""A peer that accepts every connection and never answers: what a request that hangs costs the
SDK's own client, timed against what the adapter derives from that client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

SilentPeer = tuple[str, list[socket.socket]]  # its URL, the connections it accepted


@pytest.fixture
def silent_peer() -> Iterator[SilentPeer]:
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed
            connections.append(connection)  # read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
        for connection in connections:
            connection.close()
