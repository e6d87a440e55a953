"""Where the notary's review notices land in tests: a real SMTP server (aiosmtpd) keeping every
message it accepts, and a real HTTP receiver that verifies each webhook as a chat bridge would,
with the Standard Webhooks library, answering the status it is told to."""

from __future__ import annotations

import email
import email.policy
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from testkit.notary_server import free_port


def wait_for(condition: Callable[[], bool], *, within: float = 30.0) -> None:
    """Until `condition()` holds; fail after `within` seconds (a generous deadline)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not so within {within} s")
        time.sleep(0.01)


@dataclass
class Mailbox:
    """The messages an SMTP server accepted, each with the envelope's recipients."""

    messages: list[EmailMessage] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0
    refuse: bool = False  # answer every recipient 550, as a server refusing the message

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.refuse:
            return "550 No such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        parsed = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    """An SMTP server on 127.0.0.1 (a free port) for as long as the block runs."""
    box = Mailbox(port=free_port())
    controller = Controller(box, hostname=box.host, port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class WebhookReceiver:
    """A chat bridge's end: verifies every request with `secret`, answers `status` once
    `answer` is set (clear it to hold answers back), and keeps the verified bodies it answered
    2xx (and the webhook-id each came under)."""

    url: str = ""
    secret: str = ""
    status: int = 200
    answer: threading.Event = field(default_factory=threading.Event)
    received: list[dict[str, Any]] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.requests += 1
            try:
                payload = Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError as refused:
                self.unverified.append(str(refused))
                return 400
            if self.status < 300:
                self.received.append(payload)
                self.message_ids.append(headers["webhook-id"])
            return self.status


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """An HTTP server on 127.0.0.1 taking webhooks at /hook for as long as the block runs."""
    receiver = WebhookReceiver()
    receiver.answer.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = receiver.take(body, headers)
            receiver.answer.wait(timeout=60)
            answer = json.dumps({"status": status}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.answer.set()
        server.shutdown()
        server.server_close()
