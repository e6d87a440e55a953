"""A child process for the effect concurrency tests: one HTTP client of a running notary.

    python -m testkit.agents.http_racer BASE_URL TOKEN

It opens its connection (``GET /healthz``), prints ``ready`` and then, for each line on stdin —
``{"method", "path", "json", "delay_ms"}`` — sleeps ``delay_ms`` (default 0), sends the request
with ``Authorization: Bearer TOKEN`` and prints one line ``{"status", "body"}``. The parent
writes a line to every child at once and reads one answer from each: a barrier per round, so the
children's requests reach the notary together. An empty line or EOF ends it. No Django here: it
is a client, like an agent or an approver."""

from __future__ import annotations

import json
import sys
import time

import httpx


def main(argv: list[str]) -> None:
    base_url, token = argv
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
        client.get("/healthz").raise_for_status()
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            request = json.loads(line)
            delay = request.get("delay_ms", 0) / 1000
            if delay:
                time.sleep(delay)
            response = client.request(request["method"], request["path"], json=request.get("json"))
            try:
                body = response.json()
            except ValueError:
                body = response.text[:500]
            print(json.dumps({"status": response.status_code, "body": body}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
