"""The form of an API key's token, `ik_<key id>_<secret>`, and the digest its secret is kept
as: shared by the write that issues a key and the read that authenticates one."""

from __future__ import annotations

import hashlib

TOKEN_PREFIX = "ik"


def secret_digest(secret: str) -> str:
    """The secret is 256 random bits, so a slow password hash would add nothing but latency."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
