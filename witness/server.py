"""The witness over HTTP (http.server, keep-alive): POST /add-checkpoint, the monitoring
GET /<origin hash>/checkpoint, and GET /healthz."""

from __future__ import annotations

import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from witness.service import MAX_BODY, TEXT_CONTENT_TYPE, Reply, Witness

_CHECKPOINT_PATH = re.compile(r"^/([0-9a-f]{64})/checkpoint$")
_NOT_FOUND = Reply(404, TEXT_CONTENT_TYPE, "not found\n")


class WitnessServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, witness: Witness, host: str, port: int) -> None:
        self.witness = witness
        super().__init__((host, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "interlock-witness"
    server: WitnessServer

    def do_POST(self) -> None:
        if self.path != "/add-checkpoint":
            self._answer(_NOT_FOUND)
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            self._answer(Reply(411, TEXT_CONTENT_TYPE, "Content-Length required\n"), close=True)
        elif int(length) > MAX_BODY:
            self._answer(Reply(413, TEXT_CONTENT_TYPE, "body too large\n"), close=True)
        else:
            self._answer(self.server.witness.add_checkpoint(self.rfile.read(int(length))))

    def do_GET(self) -> None:
        match = _CHECKPOINT_PATH.match(self.path)
        if self.path == "/healthz":
            self._answer(Reply(200, TEXT_CONTENT_TYPE, "ok\n"))
        elif match is not None:
            self._answer(self.server.witness.checkpoint(match.group(1)))
        else:
            self._answer(_NOT_FOUND)

    def _answer(self, reply: Reply, *, close: bool = False) -> None:
        data = reply.body.encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"witness: {self.address_string()} {format % args}\n")


def make_server(witness: Witness, host: str, port: int) -> WitnessServer:
    return WitnessServer(witness, host, port)
