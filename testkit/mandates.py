"""AP2 v0.2 mandates made the way a trusted surface and a merchant make them, with real keys:
SD-JWTs issued by the `sd-jwt` reference implementation, checkout JWTs signed by jwcrypto."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from jwcrypto.jwk import JWK
from jwcrypto.jws import JWS
from sd_jwt.common import SDObj
from sd_jwt.issuer import SDJWTIssuer

from gate_client.mandates import CHECKOUT, OPEN_PAYMENT
from ledger.core.canonical import canonical_json


def new_key() -> JWK:
    """A P-256 key pair, as AP2's examples sign ES256."""
    return JWK.generate(kty="EC", crv="P-256")


def public_jwk(key: JWK) -> dict[str, Any]:
    return cast(dict[str, Any], key.export_public(as_dict=True))


def sd_jwt(key: JWK, content: Mapping[str, Any], **claims: Any) -> str:
    """An issuer-signed SD-JWT delegating one mandate: its content is a disclosure of the
    `delegate_payload` array, as in AP2's examples. `claims`: more top-level claims."""
    issuer = SDJWTIssuer(
        {**claims, "delegate_payload": [SDObj(dict(content))]},
        key,
        sign_alg="ES256",
        extra_header_parameters={"typ": "dc+sd-jwt"},
    )
    return cast(str, issuer.sd_jwt_issuance)


def amount_range(maximum: int, currency: str = "USD", minimum: int = 0) -> dict[str, Any]:
    return {"type": "payment.amount_range", "currency": currency, "max": maximum, "min": minimum}


def open_payment_mandate(
    key: JWK,
    *,
    expires_at: datetime,
    constraints: Sequence[Mapping[str, Any]],
    agent_key: JWK | None = None,
    **content: Any,
) -> str:
    """An open Payment Mandate (v0.1's Intent Mandate), bound to the agent's key by `cnf`."""
    agent = agent_key or new_key()
    return sd_jwt(
        key,
        {
            "vct": OPEN_PAYMENT,
            "constraints": [dict(c) for c in constraints],
            "cnf": {"jwk": public_jwk(agent)},
            "iat": int(expires_at.timestamp()) - 3600,
            "exp": int(expires_at.timestamp()),
            **content,
        },
    )


def checkout_jwt(merchant_key: JWK, payload: Mapping[str, Any]) -> str:
    """The merchant-signed checkout: its payload segment is the payload's canonical JSON."""
    jws = JWS(canonical_json(dict(payload)))
    jws.add_signature(
        merchant_key, alg="ES256", protected=json.dumps({"alg": "ES256", "typ": "JWT"})
    )
    return cast(str, jws.serialize(compact=True))


def checkout_hash(jwt: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(jwt.encode()).digest()).rstrip(b"=").decode()


def checkout_mandate(
    key: JWK,
    jwt: str,
    *,
    expires_at: datetime | None = None,
    stated_hash: str | None = None,
) -> str:
    """A closed Checkout Mandate (v0.1's Cart Mandate) approving the checkout `jwt`, its
    checkout_jwt itself selectively disclosable as AP2's schema marks it."""
    content: dict[Any, Any] = {
        "vct": CHECKOUT,
        SDObj("checkout_jwt"): jwt,
        "checkout_hash": stated_hash or checkout_hash(jwt),
    }
    if expires_at is not None:
        content["exp"] = int(expires_at.timestamp())
    return sd_jwt(key, content)


# The order of P-256's group: an ECDSA signature (r, s) verifies as (r, n - s) too.
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def respelled(token: str) -> str:
    """The same mandate spelled otherwise, as anyone holding it can without any key: its issuer
    JWT with the other ECDSA signature that verifies, (r, n - s), and its disclosures in
    reverse order."""
    jwt, *disclosures = token.split("~")[:-1]
    head, payload, signature = jwt.split(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    s = int.from_bytes(raw[32:], "big")
    other = raw[:32] + (_P256_ORDER - s).to_bytes(32, "big")
    flipped = base64.urlsafe_b64encode(other).rstrip(b"=").decode()
    return "".join(f"{part}~" for part in [f"{head}.{payload}.{flipped}", *disclosures[::-1]])
