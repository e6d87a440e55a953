"""Client processes racing one notary: each a separate interpreter
(testkit.agents.http_racer) holding one token, released together for each round, so their
requests reach the notary at once and only the notary's own locking orders them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from testkit.paths import REPO_ROOT

CHILD_TIMEOUT = 60


class Racers:
    """Client processes, each holding one token; `race` sends one request per child, released
    together, and returns their answers in the same order."""

    def __init__(self, url: str, tokens: Sequence[str]) -> None:
        self.children: list[subprocess.Popen[str]] = []
        for token in tokens:
            self.children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "testkit.agents.http_racer", url, token],
                    cwd=REPO_ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for child in self.children:
            assert child.stdout is not None
            ready = child.stdout.readline()
            assert ready == "ready\n", child.communicate(timeout=CHILD_TIMEOUT)[1]

    def race(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        assert len(requests) == len(self.children)
        for child, request in zip(self.children, requests, strict=True):
            assert child.stdin is not None
            child.stdin.write(json.dumps(request) + "\n")
        for child in self.children:  # buffered above, released here back to back
            assert child.stdin is not None
            child.stdin.flush()
        answers = []
        for child in self.children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line, child.communicate(timeout=CHILD_TIMEOUT)[1]
            answers.append(json.loads(line))
        return answers

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                try:
                    child.communicate(input="\n", timeout=CHILD_TIMEOUT)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


@contextmanager
def racers(url: str, tokens: Sequence[str]) -> Iterator[Racers]:
    started = Racers(url, tokens)
    try:
        yield started
    finally:
        started.close()
