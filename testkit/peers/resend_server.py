"""A local Resend: the documented email-sending contract, for the tests and the experiments of a
Resend adapter, with the official `resend` SDK pointed at it through ``resend.api_url``.

    python -m testkit.peers.resend_server --store PATH [--key-window-seconds S]
        [--send-delay-seconds S] [--verified-domain DOMAIN ...]
        [--webhook-url URL --webhook-secret whsec_... [--webhook-delay-seconds S]]

prints its port on stdout once it listens on 127.0.0.1. Its ground truth is its store: one
fsync'd JSON line per email it really sent (with its idempotency key and tags), written before it
answers, and read back on start, so a restart forgets neither an email nor a key.

``POST /emails`` checks, in Resend's order: the ``Authorization: Bearer re_...`` key (401/403),
the body (422; 400 for bad JSON), the ``Idempotency-Key`` (400 when empty or over 256 chars; a
key seen within the key window replays its first ``{"id"}`` for the same canonical body, is 409
``invalid_idempotent_request`` for another one and 409 ``concurrent_idempotent_requests`` while
its first request is in flight), then the sender's domain (403 when not verified), and only then
sends: a refused request leaves its key unused. ``GET /emails/{id}`` and ``GET
/emails?limit=N[&after=ID]`` (newest first, the page after the email ID) read the emails back, with
a full-access key only: a sending-only key (``re_send_...`` here) is refused 401
``restricted_api_key``, as Resend refuses one; errors are ``{"statusCode", "name", "message"}``, as
the SDK parses them.

Each sent email then lives through ``email.sent`` and ``email.delivered`` (``email.bounced`` for
``bounced@resend.dev``), each after the webhook delay; with a webhook URL every event is POSTed
Svix-signed and retried on failure, every attempt written to the delivery log next to the store.
``POST /_control/webhooks`` with ``{"deliver": false}`` withholds them: webhooks stop arriving."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import svix.webhooks

from testkit.paths import REPO_ROOT
from testkit.peers.reference_service import LocalHTTPServer, post_control, serving

MAX_RECIPIENTS = 50
MAX_KEY_LENGTH = 256
BOUNCE_ADDRESS = "bounced@resend.dev"  # Resend's test recipient that always bounces
# Svix retries a failed delivery over hours; here over seconds.
RETRY_BACKOFF_SECONDS = (0.1, 0.3, 1.0)
ADDRESS = re.compile(r"[^@\s<>\"]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
MAILBOX = re.compile(r"\s*(?:[^<>]*<([^<>\s]+)>|([^<>\s]+))\s*")
SENDING_ONLY_PREFIX = "re_send_"  # a key with sending access only, here
TAG_PART = re.compile(r"[A-Za-z0-9_-]{1,256}")
# The store's own bookkeeping, not part of the email object GET /emails/{id} shows.
UNSHOWN_FIELDS = frozenset({"idempotency_key", "request_sha256", "at", "headers"})


class ApiError(Exception):
    """A refusal, in the shape the SDK turns into a `ResendError` (``.code``, ``.error_type``)."""

    def __init__(self, status: int, name: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.name = name
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"statusCode": self.status, "name": self.name, "message": self.message}


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written has not happened yet
    return [json.loads(line) for line in complete.splitlines()]


def read_emails(store: Path) -> list[dict[str, Any]]:
    """Every email the server really sent, in order."""
    return _read_lines(store)


def deliveries_path(store: Path) -> Path:
    return store.with_suffix(".deliveries.jsonl")


def _append(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, json.dumps(record, sort_keys=True).encode() + b"\n")
    os.fsync(fd)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def _address(mailbox: str) -> str | None:
    """The bare address of ``a@domain`` or ``Name <a@domain>``; None when it is neither."""
    match = MAILBOX.fullmatch(mailbox)
    address = match and (match.group(1) or match.group(2))
    return address if address and ADDRESS.fullmatch(address) else None


def _mailboxes(body: dict[str, Any], field: str, *, least: int) -> list[str] | None:
    """`field` as a list of mailboxes (Resend takes one as a plain string)."""
    value = body.get(field)
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if (
        not isinstance(items, list)
        or not least <= len(items) <= MAX_RECIPIENTS
        or not all(isinstance(item, str) and _address(item) for item in items)
    ):
        raise ApiError(
            422,
            "validation_error",
            f"Invalid `{field}` field: give {least} to {MAX_RECIPIENTS} addresses, each in the "
            "`email@example.com` or `Name <email@example.com>` format.",
        )
    return items


def validate(body: dict[str, Any]) -> dict[str, Any]:
    """The email a valid `body` asks for; an `ApiError` (422) for the first thing wrong with it."""
    for field in ("from", "to", "subject"):
        if body.get(field) is None:
            raise ApiError(422, "missing_required_field", f"Missing `{field}` field.")
    if body.get("html") is None and body.get("text") is None:
        raise ApiError(422, "missing_required_field", "Missing `html` or `text` field.")
    if not isinstance(body["from"], str) or _address(body["from"]) is None:
        raise ApiError(
            422,
            "validation_error",
            "Invalid `from` field. The email address needs to follow the `email@example.com` "
            "or `Name <email@example.com>` format.",
        )
    for field in ("subject", "html", "text"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise ApiError(422, "validation_error", f"The `{field}` field must be a `string`.")
    headers = body.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(value, str) for value in headers.values()
    ):
        raise ApiError(422, "validation_error", "The `headers` field must map names to strings.")
    tags = body.get("tags") or []
    if not isinstance(tags, list) or not all(
        isinstance(tag, dict)
        and set(tag) == {"name", "value"}
        and all(isinstance(part, str) and TAG_PART.fullmatch(part) for part in tag.values())
        for tag in tags
    ):
        raise ApiError(
            422,
            "validation_error",
            "Tags are `{name, value}` pairs that only contain ASCII letters, numbers, "
            "underscores, or dashes, at most 256 characters each.",
        )
    return {
        "from": body["from"],
        "to": _mailboxes(body, "to", least=1),
        "subject": body["subject"],
        "html": body.get("html"),
        "text": body.get("text"),
        "cc": _mailboxes(body, "cc", least=0),
        "bcc": _mailboxes(body, "bcc", least=0),
        "reply_to": _mailboxes(body, "reply_to", least=0),
        "headers": headers,
        "tags": [{"name": tag["name"], "value": tag["value"]} for tag in tags],
    }


def _canonical_digest(body: dict[str, Any]) -> str:
    """What "the same request" means for an idempotency key."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Webhooks:
    """Posts events to the endpoint as Resend does, Svix-signed and retried, logging every
    attempt, unless an experiment has withheld them."""

    def __init__(self, url: str, secret: str, log: Path) -> None:
        self.url = url
        self.deliver = True
        self._signer = svix.webhooks.Webhook(secret)
        self._log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._log_lock = threading.Lock()

    def post(self, event_type: str, email: dict[str, Any], at: float) -> None:
        msg_id = f"msg_{uuid.uuid4().hex}"  # Svix keeps one id across retries: receivers dedupe
        record = {"msg_id": msg_id, "type": event_type, "email_id": email["id"]}
        if not self.deliver:
            self._log({**record, "outcome": "withheld"})
            return
        payload = {
            "type": event_type,
            "created_at": _iso(at),
            "data": {
                "email_id": email["id"],
                "from": email["from"],
                "to": email["to"],
                "subject": email["subject"],
                "created_at": email["created_at"],
                "tags": {tag["name"]: tag["value"] for tag in email["tags"]},
            },
        }
        body = json.dumps(payload)
        for attempt, backoff in enumerate((0.0, *RETRY_BACKOFF_SECONDS), start=1):
            time.sleep(backoff)
            status, error = self._attempt(msg_id, body)
            ok = status is not None and 200 <= status < 300
            self._log(
                {
                    **record,
                    "attempt": attempt,
                    "outcome": "ok" if ok else "failed",
                    "status": status,
                    "error": error,
                }
            )
            if ok:
                return

    def _attempt(self, msg_id: str, body: str) -> tuple[int | None, str | None]:
        """(HTTP status, connection error) of one delivery attempt."""
        now = datetime.now(UTC)
        request = urllib.request.Request(
            self.url,
            data=body.encode(),
            headers={
                "Content-Type": "application/json",
                "svix-id": msg_id,
                "svix-timestamp": str(int(now.timestamp())),
                "svix-signature": self._signer.sign(msg_id, now, body),
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
                return response.status, None
        except urllib.error.HTTPError as refused:
            return refused.code, None
        except OSError as unreachable:
            return None, repr(unreachable)

    def _log(self, record: dict[str, Any]) -> None:
        with self._log_lock:
            _append(self._log_fd, {**record, "at": time.time()})


class Service:
    """What the server remembers, rebuilt from its store so a restart forgets no email or key."""

    def __init__(
        self,
        store: Path,
        *,
        key_window_seconds: float,
        send_delay_seconds: float,
        verified_domains: Sequence[str],
        webhooks: Webhooks | None,
        webhook_delay_seconds: float,
    ) -> None:
        self.key_window = key_window_seconds
        self.send_delay = send_delay_seconds
        self.verified_domains = {domain.lower() for domain in verified_domains}
        self.webhooks = webhooks
        self.webhook_delay = webhook_delay_seconds
        self._lock = threading.Lock()  # the key check and marking the key in flight are one step
        self._emails: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._by_key: dict[str, dict[str, Any]] = {}
        self._in_flight: set[str] = set()
        self._last_event: dict[str, str] = {}
        for email in read_emails(store):
            self._remember(email)
            # The timeline of an email sent before a restart has run its course.
            self._last_event[email["id"]] = self._final_event(email).removeprefix("email.")
        self._fd = os.open(store, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def send(self, body: dict[str, Any], email: dict[str, Any], key: str | None) -> str:
        """The id of the email `body` asks for: the first one for a known key, else a new one."""
        digest = _canonical_digest(body)
        address = _address(email["from"])
        assert address is not None  # validate() lets only a well-formed `from` through
        domain = address.rsplit("@", 1)[1].lower()
        with self._lock:
            if key is not None:
                first = self._by_key.get(key)
                if first is not None and time.time() - first["at"] < self.key_window:
                    if first["request_sha256"] != digest:
                        raise ApiError(
                            409,
                            "invalid_idempotent_request",
                            "Same idempotency key used with a different request payload. "
                            "Change your idempotency key or payload.",
                        )
                    return str(first["id"])
                if key in self._in_flight:
                    raise ApiError(
                        409,
                        "concurrent_idempotent_requests",
                        "Same idempotency key used while original request is still in progress. "
                        "Try the request again later.",
                    )
            if domain not in self.verified_domains:
                raise ApiError(
                    403,
                    "validation_error",
                    f"The {domain} domain is not verified. Please, add and verify your domain "
                    "on https://resend.com/domains",
                )
            if key is not None:
                self._in_flight.add(key)
        try:
            time.sleep(self.send_delay)
            at = time.time()
            sent = {
                **email,
                "id": str(uuid.uuid4()),
                "idempotency_key": key,
                "request_sha256": digest,
                "created_at": _iso(at),
                "at": at,
            }
            with self._lock:
                _append(self._fd, sent)
                self._remember(sent)
                self._last_event[sent["id"]] = "sent"
        finally:
            if key is not None:
                with self._lock:
                    self._in_flight.discard(key)
        threading.Thread(target=self._timeline, args=(sent,), daemon=True).start()
        return str(sent["id"])

    def view(self, email_id: str) -> dict[str, Any] | None:
        with self._lock:
            email = self._by_id.get(email_id)
            if email is None:
                return None
            return {
                "object": "email",
                **{field: v for field, v in email.items() if field not in UNSHOWN_FIELDS},
                "last_event": self._last_event[email_id],
            }

    def listing(self, limit: int, after: str | None = None) -> dict[str, Any] | None:
        """Newest first, without tags: Resend's list neither shows nor filters by them. `after`
        names the last email of the page before (None: no such email)."""
        with self._lock:
            newest = self._emails[::-1]
            start = 0
            if after is not None:
                ids = [e["id"] for e in newest]
                if after not in ids:
                    return None
                start = ids.index(after) + 1
            return {
                "object": "list",
                "has_more": len(newest) > start + limit,
                "data": [
                    {
                        **{f: e[f] for f in ("id", "to", "from", "subject", "created_at")},
                        "last_event": self._last_event[e["id"]],
                    }
                    for e in newest[start : start + limit]
                ],
            }

    def _remember(self, email: dict[str, Any]) -> None:
        self._emails.append(email)
        self._by_id[email["id"]] = email
        if email["idempotency_key"] is not None:
            self._by_key[email["idempotency_key"]] = email  # the latest use starts its window

    def _timeline(self, email: dict[str, Any]) -> None:
        """What happens to a sent email, posted to the webhook endpoint as it happens."""
        for event_type in ("email.sent", self._final_event(email)):
            time.sleep(self.webhook_delay)
            at = time.time()
            with self._lock:
                self._last_event[email["id"]] = event_type.removeprefix("email.")
            if self.webhooks is not None:
                self.webhooks.post(event_type, email, at)

    @staticmethod
    def _final_event(email: dict[str, Any]) -> str:
        recipients = [*email["to"], *(email["cc"] or []), *(email["bcc"] or [])]
        bounces = any((_address(r) or "").lower() == BOUNCE_ADDRESS for r in recipients)
        return "email.bounced" if bounces else "email.delivered"


class Handler(BaseHTTPRequestHandler):
    server: ResendHTTPServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = urlsplit(self.path).path
        try:
            if path == "/_control/webhooks":
                reply = self._control(_json_object(raw))
            elif path == "/emails":
                self._authorize()
                body = _json_object(raw)
                email = validate(body)
                key = self.headers.get("Idempotency-Key")
                if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
                    raise ApiError(
                        400,
                        "invalid_idempotency_key",
                        f"The key must be between 1-{MAX_KEY_LENGTH} chars.",
                    )
                reply = {"id": self.server.service.send(body, email, key)}
            else:
                raise ApiError(404, "not_found", "The requested endpoint does not exist.")
        except ApiError as refusal:
            self._reply(refusal.status, refusal.body())
        else:
            self._reply(200, reply)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        service = self.server.service
        try:
            self._authorize(reading=True)
            if url.path == "/emails":
                query = parse_qs(url.query)
                limit = query.get("limit", ["20"])[-1]
                if not (limit.isdigit() and 1 <= int(limit) <= 100):
                    raise ApiError(
                        422, "validation_error", "The `limit` must be between 1 and 100."
                    )
                listed = service.listing(int(limit), query.get("after", [None])[-1])
                if listed is None:
                    raise ApiError(422, "validation_error", "The `after` email does not exist.")
                reply = listed
            elif not url.path.startswith("/emails/"):
                raise ApiError(404, "not_found", "The requested endpoint does not exist.")
            elif (email := service.view(url.path.removeprefix("/emails/"))) is None:
                raise ApiError(404, "not_found", "Email not found")
            else:
                reply = email
        except ApiError as refusal:
            self._reply(refusal.status, refusal.body())
        else:
            self._reply(200, reply)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request log on stderr would fill the pipe of a test that never reads it."""

    def _authorize(self, *, reading: bool = False) -> None:
        scheme, _, api_key = self.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not api_key.strip():
            raise ApiError(
                401,
                "missing_api_key",
                "Missing API key in the authorization header. Include the following header "
                "Authorization: Bearer YOUR_API_KEY in the request.",
            )
        if not api_key.strip().startswith("re_"):
            raise ApiError(403, "invalid_api_key", "API key is invalid")
        if reading and api_key.strip().startswith(SENDING_ONLY_PREFIX):
            raise ApiError(
                401, "restricted_api_key", "This API key is restricted to only send emails"
            )

    def _control(self, body: dict[str, Any]) -> dict[str, Any]:
        deliver = body.get("deliver")
        webhooks = self.server.service.webhooks
        if not isinstance(deliver, bool) or webhooks is None:
            raise ApiError(422, "validation_error", "Give `deliver` a boolean, with webhooks on.")
        webhooks.deliver = deliver
        return {"deliver": deliver}

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, "validation_error", "The request body must be a JSON object.")
    return body


class ResendHTTPServer(LocalHTTPServer):
    def __init__(self, service: Service) -> None:
        super().__init__(Handler)
        self.service = service


@dataclass(frozen=True)
class RunningResend:
    url: str
    store: Path

    def emails(
        self, *, tag: tuple[str, str] | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """The emails really sent, in order: the ground truth, not what a client believes."""
        return [
            email
            for email in read_emails(self.store)
            if (tag is None or {"name": tag[0], "value": tag[1]} in email["tags"])
            and (idempotency_key is None or email["idempotency_key"] == idempotency_key)
        ]

    def deliveries(self) -> list[dict[str, Any]]:
        """Every webhook delivery attempt (or withheld event), in order."""
        return _read_lines(deliveries_path(self.store))

    def set_webhooks(self, deliver: bool) -> None:
        post_control(f"{self.url}/_control/webhooks", {"deliver": deliver})


@contextmanager
def running_resend(
    store: Path,
    *,
    key_window_seconds: float = 86400,
    send_delay_seconds: float = 0,
    verified_domains: Sequence[str] = ("example.com",),
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    webhook_delay_seconds: float = 0.2,
) -> Iterator[RunningResend]:
    """Start the server as its own process; stop it on exit."""
    command = [
        sys.executable,
        "-m",
        "testkit.peers.resend_server",
        "--store",
        str(store.resolve()),
        "--key-window-seconds",
        str(key_window_seconds),
        "--send-delay-seconds",
        str(send_delay_seconds),
        "--webhook-delay-seconds",
        str(webhook_delay_seconds),
    ]
    for domain in verified_domains:
        command += ["--verified-domain", domain]
    if webhook_url is not None:
        command += ["--webhook-url", webhook_url]
    if webhook_secret is not None:
        command += ["--webhook-secret", webhook_secret]
    with serving(command, cwd=REPO_ROOT) as url:
        yield RunningResend(url, store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="ground truth, JSON lines")
    parser.add_argument("--key-window-seconds", type=float, default=86400.0)
    parser.add_argument("--send-delay-seconds", type=float, default=0.0, help="key in flight")
    parser.add_argument(
        "--verified-domain", action="append", help="repeatable; default example.com"
    )
    parser.add_argument("--webhook-url")
    parser.add_argument("--webhook-secret", help="whsec_...")
    parser.add_argument("--webhook-delay-seconds", type=float, default=0.2)
    args = parser.parse_args()
    if (args.webhook_url is None) != (args.webhook_secret is None):
        parser.error("--webhook-url and --webhook-secret go together")
    webhooks = (
        None
        if args.webhook_url is None
        else Webhooks(args.webhook_url, args.webhook_secret, deliveries_path(args.store))
    )
    service = Service(
        args.store,
        key_window_seconds=args.key_window_seconds,
        send_delay_seconds=args.send_delay_seconds,
        verified_domains=args.verified_domain or ["example.com"],
        webhooks=webhooks,
        webhook_delay_seconds=args.webhook_delay_seconds,
    )
    server = ResendHTTPServer(service)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
