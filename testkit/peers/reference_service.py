"""A reference service speaking HttpTarget's contract: the crash matrix, the experiments and
the demo send effects to it, and an agent's own integration tests can too.

    python -m testkit.peers.reference_service --store PATH [--dedupe] [--lookup]
        [--attest NOTARY_URL --attest-token TOKEN] [--list-key KEY]

prints its port on stdout once it listens on 127.0.0.1. Its ground truth is its own store: one
fsync'd JSON line each time it really acted (effect id, idempotency key, payload, result_ref),
written before it answers, so a client SIGKILLed while the response is on the wire cannot
un-happen an effect. The tests read the truth from that file, never from the client's journal.

`--dedupe` replays the first result for an Idempotency-Key it has seen instead of acting again
(tier 1); `--lookup` answers ``GET /effects/<id>`` (tier 2), which is otherwise 501.
``GET /effects?created_gte=T&created_lt=T[&limit=N][&starting_after=REF]`` lists what it did
(every act, in the order it acted; T in Unix seconds), a page at a time (``{"data",
"has_more"}``, at most 100), which reconciliation reads; with `--list-key KEY` only under
``Authorization: Bearer KEY``. ``POST
/control/drop-response`` with ``{"effect_id"}`` makes the next request for that effect act and
then hang up without a response: a response lost on the wire, with the client still alive.

`--attest` makes it a write-ahead attesting service (a target declared `attests_before_acting`):
before acting on ``POST /effects`` it attests ``before_acting`` to the notary with the service
key TOKEN and acts only on the notary's 201; anything else (a refusal, another status, no
answer) and it does not act and answers 409 ``not_acknowledged``, which a client takes as in
doubt. After acting and answering it attests ``performed`` with the result_ref, best effort.
``POST /control/skip-performed`` with ``{"effect_id"}`` makes the next act for that effect leave
that second attestation out: a service that died between acting and saying so."""

from __future__ import annotations

import argparse
import hmac
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def read_acts(store: Path, effect_id: str | None = None) -> list[dict[str, Any]]:
    """Every time the service acted, in order (only `effect_id`'s when given)."""
    if not store.exists():
        return []
    data = store.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written has not happened yet
    acts = [json.loads(line) for line in complete.splitlines()]
    return [a for a in acts if effect_id is None or a["effect_id"] == effect_id]


ATTEST_TIMEOUT_SECONDS = 5.0
LIST_PAGE_MAX = 100


@dataclass(frozen=True)
class Attestor:
    """The service's side of write-ahead attestation: ask the notary before acting, tell it
    after. Recovery counts "no attestation by max_inflight" as never acted, so the service acts
    only on an acknowledgement it has in hand."""

    notary_url: str
    token: str
    timeout_seconds: float = ATTEST_TIMEOUT_SECONDS

    def before_acting(self, effect_id: str) -> str | None:
        """None if the notary acknowledged (201) and the service may act; else why it may not.
        No answer is no acknowledgement: acting on it could act after recovery resent."""
        try:
            status = self._post({"effect_id": effect_id, "stage": "before_acting"})
        except urllib.error.HTTPError as error:
            return f"the notary answered {error.code}: {_error_detail(error)}"
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            return f"no answer from the notary: {error}"
        return None if status == 201 else f"the notary answered {status}, not 201"

    def performed(self, effect_id: str, result_ref: str) -> bool:
        """Best effort: unsaid, the effect keeps only its intent, which recovery reports as
        AMBIGUOUS rather than guess."""
        body = {"effect_id": effect_id, "stage": "performed", "reference": result_ref}
        try:
            return self._post(body) == 201
        except (urllib.error.URLError, http.client.HTTPException, OSError):
            return False

    def _post(self, body: dict[str, Any]) -> int:
        request = urllib.request.Request(
            f"{self.notary_url.rstrip('/')}/v1/attestations",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
            response.read()
            return int(response.status)


def _error_detail(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read())
        return f"{body['error']}: {body.get('detail', '')}"
    except (ValueError, KeyError, TypeError, OSError):
        return f"http_{error.code}"


@dataclass(frozen=True)
class Outcome:
    """What one ``POST /effects`` came to."""

    result_ref: str | None  # None: not acknowledged, not acted
    replayed: bool = False
    drop: bool = False  # acted; hang up without a response
    refused: str = ""  # why the notary's acknowledgement is missing
    attest_performed: bool = False  # acted under an acknowledgement: say so after answering


class Service:
    """What the service remembers, rebuilt from its store so a restart forgets no key."""

    def __init__(
        self,
        store: Path,
        *,
        dedupe: bool,
        lookup: bool,
        attestor: Attestor | None = None,
        list_key: str | None = None,
    ) -> None:
        self.dedupe = dedupe
        self.lookup = lookup
        self.attestor = attestor
        self.list_key = list_key
        self._acts: list[dict[str, Any]] = []
        # The key check, the attestation and the act are one step.
        self._lock = threading.Lock()
        self._by_key: dict[str, str] = {}
        self._by_effect: dict[str, str] = {}
        self._drop_for: set[str] = set()
        self._skip_performed_for: set[str] = set()
        for act in read_acts(store):
            self._remember(act)
        self._fd = os.open(store, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def act(self, effect_id: str, key: str | None, payload: Any) -> Outcome:
        """Act on one request, or replay a known key's result, or (attesting) refuse to act
        without the notary's acknowledgement."""
        with self._lock:
            if self.dedupe and key is not None and key in self._by_key:
                return Outcome(self._by_key[key], replayed=True, drop=self._take_drop(effect_id))
            if self.attestor is not None:
                refused = self.attestor.before_acting(effect_id)
                if refused is not None:
                    return Outcome(None, refused=refused)
            act = {
                "effect_id": effect_id,
                "idempotency_key": key,
                "payload": payload,
                "result_ref": f"res_{uuid.uuid4().hex[:16]}",
                "at": time.time(),
            }
            line = json.dumps(act, sort_keys=True).encode() + b"\n"
            os.write(self._fd, line)
            os.fsync(self._fd)
            self._remember(act)
            attest = self.attestor is not None and effect_id not in self._skip_performed_for
            self._skip_performed_for.discard(effect_id)
            return Outcome(
                act["result_ref"], drop=self._take_drop(effect_id), attest_performed=attest
            )

    def attest_performed(self, effect_id: str, outcome: Outcome) -> None:
        if self.attestor is not None and outcome.attest_performed and outcome.result_ref:
            self.attestor.performed(effect_id, outcome.result_ref)

    def find(self, effect_id: str) -> str | None:
        with self._lock:
            return self._by_effect.get(effect_id)

    def listing(
        self, *, gte: float, lt: float, limit: int, starting_after: str | None
    ) -> dict[str, Any] | None:
        """The acts in [gte, lt), in the order they happened, a page from after the act named
        `starting_after` on; None when that act is not in the range."""
        with self._lock:
            acts = [a for a in self._acts if gte <= a["at"] < lt]
        start = 0
        if starting_after is not None:
            refs = [a["result_ref"] for a in acts]
            if starting_after not in refs:
                return None
            start = refs.index(starting_after) + 1
        page = acts[start : start + limit]
        return {"data": page, "has_more": start + limit < len(acts)}

    def drop_next_response(self, effect_id: str) -> None:
        with self._lock:
            self._drop_for.add(effect_id)

    def skip_next_performed(self, effect_id: str) -> None:
        with self._lock:
            self._skip_performed_for.add(effect_id)

    def _take_drop(self, effect_id: str) -> bool:
        """Whether to drop this response; the caller holds the lock. Only a request that acted
        or replayed takes it: one refused unacknowledged never acted, and answers."""
        drop = effect_id in self._drop_for
        self._drop_for.discard(effect_id)
        return drop

    def _remember(self, act: dict[str, Any]) -> None:
        self._acts.append(act)
        if act["idempotency_key"] is not None:
            self._by_key.setdefault(act["idempotency_key"], act["result_ref"])
        self._by_effect.setdefault(act["effect_id"], act["result_ref"])


class Handler(BaseHTTPRequestHandler):
    server: TargetHTTPServer

    def do_POST(self) -> None:
        body = self._json_body()
        if body is None:
            return
        service = self.server.service
        controls = {
            "/control/drop-response": service.drop_next_response,
            "/control/skip-performed": service.skip_next_performed,
        }
        if self.path in controls:
            if not isinstance(body.get("effect_id"), str):
                self._reply(400, {"error": "bad_request"})
                return
            controls[self.path](body["effect_id"])
            self._reply(200, {"ok": True})
        elif self.path == "/effects":
            effect_id, payload = body.get("effect_id"), body.get("payload")
            if not isinstance(effect_id, str) or not isinstance(payload, dict):
                self._reply(400, {"error": "bad_request"})
                return
            key = self.headers.get("Idempotency-Key")
            outcome = service.act(effect_id, key, payload)
            if outcome.result_ref is None:
                self._reply(409, {"error": "not_acknowledged", "detail": outcome.refused})
                return
            if outcome.drop:
                self.close_connection = True  # acted, and the response never leaves
            else:
                headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
                self._reply(200, {"result_ref": outcome.result_ref}, headers)
            # After the answer, so the client's own verdict is not held up by the notary.
            service.attest_performed(effect_id, outcome)
        else:
            self._reply(404, {"error": "no_such_endpoint"})

    def do_GET(self) -> None:
        prefix = "/effects/"
        if urlsplit(self.path).path == "/effects":
            self._list()
        elif not self.path.startswith(prefix):
            self._reply(404, {"error": "no_such_endpoint"})
        elif not self.server.service.lookup:
            self._reply(501, {"error": "lookup_not_supported"})
        elif (result_ref := self.server.service.find(self.path[len(prefix) :])) is None:
            self._reply(404, {"error": "not_found"})
        else:
            self._reply(200, {"result_ref": result_ref})

    def _list(self) -> None:
        service = self.server.service
        if service.list_key is not None:
            given = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if not hmac.compare_digest(given.encode(), service.list_key.encode()):
                self._reply(401, {"error": "unauthorized"})
                return
        query = {name: values[-1] for name, values in parse_qs(urlsplit(self.path).query).items()}
        try:
            gte, lt = float(query["created_gte"]), float(query["created_lt"])
            limit = int(query.get("limit", str(LIST_PAGE_MAX)))
        except (KeyError, ValueError):
            self._reply(400, {"error": "bad_request", "detail": "created_gte and created_lt"})
            return
        if not 1 <= limit <= LIST_PAGE_MAX:
            self._reply(400, {"error": "bad_request", "detail": f"limit 1 to {LIST_PAGE_MAX}"})
            return
        page = service.listing(
            gte=gte, lt=lt, limit=limit, starting_after=query.get("starting_after")
        )
        if page is None:
            self._reply(400, {"error": "bad_request", "detail": "starting_after is not listed"})
        else:
            self._reply(200, page)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request log on stderr would fill the pipe of a test that never reads it."""

    def _json_body(self) -> dict[str, Any] | None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._reply(400, {"error": "bad_json"})
            return None
        return body

    def _reply(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class LocalHTTPServer(ThreadingHTTPServer):
    """A peer for crash tests, on 127.0.0.1 and a free port (or the one given)."""

    request_queue_size = 64  # a whole matrix connects at once; the default 5 drops SYNs

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client SIGKILLed mid-response is the point of the exercise, not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class TargetHTTPServer(LocalHTTPServer):
    def __init__(self, service: Service, port: int = 0) -> None:
        super().__init__(Handler, port)
        self.service = service


@dataclass(frozen=True)
class RunningServer:
    url: str
    store: Path

    def acts(self, effect_id: str) -> list[dict[str, Any]]:
        return read_acts(self.store, effect_id)

    def drop_next_response(self, effect_id: str) -> None:
        post_control(f"{self.url}/control/drop-response", {"effect_id": effect_id})

    def skip_next_performed(self, effect_id: str) -> None:
        post_control(f"{self.url}/control/skip-performed", {"effect_id": effect_id})


def post_control(url: str, body: dict[str, Any]) -> None:
    """Tell a local peer how to behave next (a JSON POST to its control endpoint)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()


@contextmanager
def serving(command: list[str], *, cwd: Path | None = None) -> Iterator[str]:
    """Run a local peer that prints its port once it listens; yield its URL; stop it."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{int(process.stdout.readline())}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def running_server(
    store: Path,
    *,
    dedupe: bool,
    lookup: bool,
    attest: str | None = None,
    attest_token: str | None = None,
    list_key: str | None = None,
) -> Iterator[RunningServer]:
    """Start the service as its own process; stop it on exit. `attest` (the notary's URL, with
    the service key `attest_token`) makes it attest before acting; `list_key` is the key its
    list of acts needs."""
    if (attest is None) != (attest_token is None):
        raise ValueError("attest and attest_token go together")
    flags = [flag for flag, on in (("--dedupe", dedupe), ("--lookup", lookup)) if on]
    if attest is not None and attest_token is not None:
        flags += ["--attest", attest, "--attest-token", attest_token]
    if list_key is not None:
        flags += ["--list-key", list_key]
    command = [sys.executable, "-m", "testkit.peers.reference_service", "--store", str(store)]
    with serving([*command, *flags]) as url:
        yield RunningServer(url, store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="ground truth, JSON lines")
    parser.add_argument("--dedupe", action="store_true", help="replay on a known key")
    parser.add_argument("--lookup", action="store_true", help="answer GET /effects/<id>")
    parser.add_argument(
        "--attest", metavar="NOTARY_URL", help="attest each request to this notary before acting"
    )
    parser.add_argument("--attest-token", metavar="TOKEN", help="the notary service key")
    parser.add_argument("--list-key", metavar="KEY", help="the bearer key GET /effects needs")
    parser.add_argument("--port", type=int, default=0, help="default: a free one, printed")
    args = parser.parse_args()
    if (args.attest is None) != (args.attest_token is None):
        parser.error("--attest and --attest-token go together")
    attestor = Attestor(args.attest, args.attest_token) if args.attest else None
    service = Service(
        args.store,
        dedupe=args.dedupe,
        lookup=args.lookup,
        attestor=attestor,
        list_key=args.list_key,
    )
    server = TargetHTTPServer(service, args.port)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
