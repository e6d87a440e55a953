"""HttpTarget against a real local HTTP server: which answers are sent, refused or in doubt."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gate_client.http_target import HttpTarget
from gate_client.targets import FailedDefinitively, Found, InDoubt, NotFound, Sent, Tier, Unknown

# What the server answers, by the payload's "answer" field or the looked-up effect id.
SEND_ANSWERS = {
    "ok": (201, {"result_ref": "ref-1"}),
    "refuse": (422, {"error": "invalid_recipient"}),
    "refuse-bare": (400, None),
    "conflict": (409, {"error": "concurrent_request"}),
    "broken": (503, {"error": "unavailable"}),
}
LOOKUP_ANSWERS = {"eff_found": (200, {"result_ref": "ref-9"}), "eff_gone": (404, None)}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.headers["Idempotency-Key"] == body["effect_id"]
        if body["payload"]["answer"] == "hang-up":
            self.close_connection = True
            return  # acted, maybe; no response at all
        self._answer(*SEND_ANSWERS[body["payload"]["answer"]])

    def do_GET(self) -> None:
        self._answer(*LOOKUP_ANSWERS.get(self.path.rsplit("/", 1)[-1], (500, None)))

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode() if body is not None else b"oops"
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def target() -> Iterator[HttpTarget]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield HttpTarget(
        "svc",
        f"http://127.0.0.1:{server.server_address[1]}",
        Tier.LOOKUP,
        queryable=True,
        key_window=None,
        max_inflight=timedelta(seconds=2),
        timeout_seconds=2,
    )
    server.shutdown()


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ("ok", Sent("ref-1")),
        ("refuse", FailedDefinitively("invalid_recipient")),
        ("refuse-bare", FailedDefinitively("http_400")),
    ],
)
def test_answers_that_settle_a_send(target: HttpTarget, answer: str, outcome: object) -> None:
    assert target.send("eff_1", {"answer": answer}) == outcome


@pytest.mark.parametrize("answer", ["conflict", "broken", "hang-up"])
def test_answers_that_leave_a_send_in_doubt(target: HttpTarget, answer: str) -> None:
    with pytest.raises(InDoubt):
        target.send("eff_1", {"answer": answer})


def test_an_unreachable_service_is_in_doubt_and_unknown() -> None:
    nowhere = HttpTarget(
        "svc", "http://127.0.0.1:9", Tier.LOOKUP, True, None, timedelta(seconds=1), 1
    )
    with pytest.raises(InDoubt):
        nowhere.send("eff_1", {"answer": "ok"})
    assert isinstance(nowhere.lookup("eff_1", {}), Unknown)


def test_lookups(target: HttpTarget) -> None:
    assert target.lookup("eff_found", {}) == Found("ref-9")
    assert target.lookup("eff_gone", {}) == NotFound()
    assert target.lookup("eff_other", {}) == Unknown("HTTP 500")


def test_max_inflight_may_not_be_shorter_than_the_request_timeout() -> None:
    with pytest.raises(ValueError, match="must be at least the request timeout"):
        HttpTarget("svc", "http://x", Tier.LOOKUP, True, None, timedelta(seconds=1), 5)
