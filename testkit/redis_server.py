"""A private redis-server for tests that need Redis to go away: on a free port, no persistence,
SIGKILLed (never the shared one on 6379) and started again on the same port when asked."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from testkit.notary_server import free_port


class PrivateRedis:
    """One redis-server process at a time on one port: `kill` SIGKILLs it, `start` brings a
    fresh, empty one up on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        log = self._workdir / f"redis-{self.port}.log"
        self._process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._workdir),
            ],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while not self.answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {log.read_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer within 30 s")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the server and wait until it is gone and its port refuses connections."""
        if self._process is None:
            return
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(timeout=30)
        self._process = None

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)


@contextmanager
def private_redis(workdir: Path) -> Iterator[PrivateRedis]:
    """A started private redis-server, SIGKILLed on the way out whatever happened."""
    server = PrivateRedis(workdir)
    server.start()
    try:
        yield server
    finally:
        server.kill()
