"""AP2 mandates as the evidence of a lease: verified against the keys a tenant trusts, then read
as the most a lease may approve.

AP2 v0.2 (Agent Payments Protocol, April 2026) secures a mandate as an SD-JWT (RFC 9901): an
issuer-signed JWT whose `delegate_payload` array holds the mandate content as a disclosure,
`~`-joined with its disclosures. Two kinds are accepted, each by its exact `vct`:

- an open Payment Mandate (`mandate.payment.open.1`, what v0.1 called an Intent Mandate): the
  user's standing approval, bounded by constraints. It becomes a standing lease: its
  `payment.amount_range` is each effect's limit and the lease's currency, its `exp` (and a
  `payment.execution_date` `not_after`) the latest expiry, and its totals a budget of every
  agent key together over the lease's whole life: `payment.budget` the amount, and the count
  `payment.agent_recurrence` (ON_DEMAND) allows in `max_occurrences`; without recurrence the
  mandate approves one payment, so the lease one effect;
- a closed Checkout Mandate (`mandate.checkout.1`, v0.1's Cart Mandate): the user's approval of
  one merchant-signed `checkout_jwt`, bound by `checkout_hash`, the base64url SHA-256 of the
  `checkout_jwt` string. It becomes a payload-bound lease: the checkout JWT's payload segment
  must be the canonical JSON (the ledger's encoding) of the effect's payload, so the lease's
  `payload_hash`, SHA-256 of those bytes, approves exactly that payload, once.

Signatures are verified by the `sd-jwt` reference implementation and `jwcrypto`, never here.
The signer is whichever trusted key verifies the signature: a `kid` or `iss` in the token names
nobody. A constraint this module cannot enforce through a lease is refused, as AP2 requires
of unknown constraints, never dropped: a lease broader than its mandate would be worse than no
mandate. `mandate_refusal` is the one rule the notary applies at grant and the offline
verifier applies again to the LEASE_GRANTED entry that carries the mandate.

A mandate is spent in the ledger. It is named by its hash (`mandate_hash`): the SHA-256 of what
its signer signed, the issuer JWT's protected header and payload, which fix every disclosure by
its digest. Neither the signature (an ECDSA signature is not unique: anyone may turn one into
another that verifies) nor the order or choice of disclosures is part of it, so a mandate
re-encoded or re-disclosed is the same mandate. A one-payment or Checkout Mandate grants one
lease (`regrant_refusal`); the leases of an open one share its totals (`MandateTerms.total`)."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, TypeGuard, cast

from babel.numbers import get_currency_precision
from jwcrypto.common import JWException
from jwcrypto.jwk import JWK
from jwcrypto.jws import JWS, InvalidJWSSignature
from sd_jwt.verifier import SDJWTVerifier

from gate_client.budgets import Budget, BudgetPer, Total
from gate_client.leases import Lease
from gate_client.money import MoneyDeclaration, MoneyError, read_money
from ledger.core.canonical import MAX_SAFE_INTEGER, CanonicalJSONError, parse_canonical
from ledger.core.entries import format_timestamp

MANDATE_FORMAT = "ap2-0.2+sd-jwt"
OPEN_PAYMENT = "mandate.payment.open.1"
CHECKOUT = "mandate.checkout.1"
# ECDSA: AP2 requires a non-deterministic scheme for the checkout JWT, and its examples sign
# every mandate ES256.
SIGNING_ALGS = frozenset({"ES256", "ES384", "ES512"})
MAX_TOKEN = 64 * 1024
# Claims of an open Payment Mandate besides its constraints. Any other (a pre-set payee,
# amount or instrument) fixes a value the closed mandate must repeat, which a lease cannot.
_OPEN_CLAIMS = frozenset({"vct", "constraints", "cnf", "iat", "exp", "risk_data"})
# What parsing a hostile token may raise: JSON nested past the parser's stack is a
# RecursionError, not a ValueError.
_UNREADABLE = (JWException, ValueError, TypeError, RecursionError)

Role = Literal["user", "merchant"]


class MandateError(ValueError):
    """A mandate that cannot be the evidence of a lease, and why: `code` is one of
    invalid_mandate (unreadable or malformed), untrusted_signature (no key the tenant trusts
    verifies it), mandate_expired, unresolved_constraint (a constraint or claim a lease cannot
    enforce), mandate_binding (the checkout hash or payload does not bind), beyond_mandate
    (the lease would approve more than the mandate)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class TrustedKey:
    """A public key whose mandates a tenant accepts: a user's (or their agent provider's
    trusted surface's) for the mandates themselves, a merchant's for checkout JWTs."""

    key_id: str  # RFC 7638 thumbprint (SHA-256) of the public key: its identity
    role: Role
    holder: str  # who the tenant says holds it, as a person reads it
    jwk: Mapping[str, Any]  # the public JWK, private parts never

    def body(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "role": self.role,
            "holder": self.holder,
            "jwk": dict(self.jwk),
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> TrustedKey:
        return trusted_key(body["jwk"], role=body["role"], holder=body["holder"])


def trusted_key(jwk: Mapping[str, Any], *, role: str, holder: str) -> TrustedKey:
    """The key as a tenant registers it: a public elliptic-curve JWK; its id is computed."""
    if role not in ("user", "merchant"):
        raise MandateError("invalid_mandate", "a mandate key's role is user or merchant")
    if not isinstance(jwk, Mapping) or "d" in jwk:
        raise MandateError("invalid_mandate", "a mandate key is a public JWK (no private part)")
    try:
        key = JWK(**jwk)
    except (JWException, ValueError, TypeError) as exc:
        raise MandateError("invalid_mandate", f"not a JWK: {exc}") from exc
    if key.get("kty") != "EC":
        raise MandateError("invalid_mandate", "a mandate key is an EC key (AP2 signs ECDSA)")
    public = cast(dict[str, Any], key.export_public(as_dict=True))
    return TrustedKey(
        key_id=cast(str, key.thumbprint()), role=cast(Role, role), holder=holder, jwk=public
    )


@dataclass(frozen=True)
class Mandate:
    token: str  # the SD-JWT exactly as received: the signed form the ledger keeps
    mandate_hash: str  # what names it, however it is encoded: see the module's docstring
    vct: str
    content: Mapping[str, Any]  # the mandate content, its disclosures resolved
    signer: TrustedKey
    merchant: TrustedKey | None  # a checkout's: the key that signed its checkout_jwt
    expires_at: datetime | None  # the earliest of its exp and execution_date.not_after
    checkout_payload: bytes | None  # a checkout's: the checkout JWT's payload, canonical JSON

    def evidence(self) -> dict[str, Any]:
        """What LEASE_GRANTED keeps: the token and the keys that verified it, so an auditor
        re-verifies it offline and compares the key ids with the keys they trust."""
        merchant = {"merchant": self.merchant.body()} if self.merchant is not None else {}
        return {
            "format": MANDATE_FORMAT,
            "vct": self.vct,
            "token": self.token,
            "mandate_hash": self.mandate_hash,
            "signer": self.signer.body(),
            **merchant,
        }


@dataclass(frozen=True)
class MandateTerms:
    """The most a lease granted from a mandate may approve."""

    expires_at: datetime | None
    currency: str | None
    amount_limit: int | None  # each effect's amount at most this, in minor units
    payload_hash: str | None  # exactly this payload
    # What all the lease's effects together may spend while it lasts: an amount (minor units
    # of `currency`) and a count. A mandate without payment.agent_recurrence approves one.
    total_amount: int | None = None
    total_count: int | None = None

    def budget(self, *, granted_at: datetime) -> Budget | None:
        """The lease budget that holds its effects to the totals: every agent key together,
        over a window as long as the lease, so no spend under it ever leaves the window."""
        if self.total_amount is None and self.total_count is None:
            return None
        if self.expires_at is None:
            raise MandateError("invalid_mandate", "a mandate with totals needs an end")
        lifetime = math.ceil((self.expires_at - granted_at).total_seconds())
        return Budget(BudgetPer.TENANT, max(lifetime, 1), self.total_amount, self.total_count)

    @property
    def total(self) -> Total | None:
        """What every lease granted from the mandate may spend together, ever."""
        if self.total_amount is None and self.total_count is None:
            return None
        return Total(self.total_amount, self.total_count)

    @property
    def single_use(self) -> bool:
        """A one-payment or Checkout Mandate: it grants one lease."""
        return self.total_count == 1


def verify_mandate(token: Any, keys: Iterable[TrustedKey], *, now: datetime) -> Mandate:
    """The mandate in `token`, verified against `keys` (users' for the mandate, merchants' for
    a checkout JWT) and unexpired at `now`; MandateError otherwise."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN or not token.isascii():
        raise MandateError(
            "invalid_mandate", f"a mandate is an SD-JWT string of at most {MAX_TOKEN} characters"
        )
    if "~~" in token or not token.endswith("~"):
        raise MandateError(
            "invalid_mandate",
            "a mandate is one issuer-signed SD-JWT ending in '~': a delegation chain or a "
            "key-bound presentation is not accepted",
        )
    known = list(keys)
    signer, claims = _verified_sd_jwt(token, [k for k in known if k.role == "user"])
    content = _mandate_content(claims)
    expires = _expiry(claims, content)
    if expires is not None and now >= expires:
        raise MandateError("mandate_expired", f"the mandate expired at {format_timestamp(expires)}")
    vct = content["vct"]
    named = mandate_hash(token)
    if vct == OPEN_PAYMENT:
        _check_open_payment(content, now)
        return Mandate(token, named, vct, content, signer, None, expires, None)
    merchant, payload = _checkout(content, claims, [k for k in known if k.role == "merchant"])
    return Mandate(token, named, vct, content, signer, merchant, expires, payload)


def mandate_hash(token: str) -> str:
    """The mandate's name: SHA-256 (hex) of its issuer JWT's signing input, `header.payload`
    as signed. Disclosures and the signature are left out: see the module's docstring."""
    head, payload, _signature = token.split("~", 1)[0].split(".")
    return hashlib.sha256(f"{head}.{payload}".encode("ascii")).hexdigest()


def regrant_refusal(mandate: Mandate, terms: MandateTerms, granted: Sequence[str]) -> str | None:
    """None if `mandate`, whose terms are `terms`, may be granted again, the leases granted
    from it before being `granted` (in ledger order); else why not. A one-payment or Checkout
    Mandate grants once: a second lease would approve a payment its signer never did. An open
    mandate with totals grants again, the new lease sharing them (`MandateTerms.total`)."""
    if granted and terms.single_use:
        return (
            f"mandate {mandate.mandate_hash} approves one payment and was granted already, "
            f"to {granted[0]}"
        )
    return None


def granted_terms(lease: Lease, mandate: Mandate) -> MandateTerms:
    """The mandate's terms as `lease` was granted from them: a grant from a mandate limits the
    amount field it was granted for, so a checkout's money is read from that field."""
    return mandate_terms(mandate, amount_field=next(iter(lease.limits), "amount"))


def mandate_terms(mandate: Mandate, *, amount_field: str = "amount") -> MandateTerms:
    """What the mandate lets a lease approve. A checkout's money is read as a target declares
    it (gate_client.money): its amount in `amount_field`, the field the lease's limit names,
    and its currency in `currency`; a checkout whose money does not read so is refused."""
    if mandate.checkout_payload is not None:
        declared = MoneyDeclaration(amount_field, currency_field="currency")
        try:
            money = read_money(parse_canonical(mandate.checkout_payload), declared)
        except (MoneyError, AttributeError) as exc:
            raise MandateError("invalid_mandate", f"the checkout's money: {exc}") from exc
        return MandateTerms(
            expires_at=mandate.expires_at,
            currency=money.currency or None,
            amount_limit=money.amount_minor,
            payload_hash=hashlib.sha256(mandate.checkout_payload).hexdigest(),
            total_count=1,  # one checkout: one effect, whatever the cases
        )
    constraints = mandate.content["constraints"]
    amount = _amount_range(constraints)
    recurrence = _one_of(constraints, "payment.agent_recurrence")
    budget = _one_of(constraints, "payment.budget")
    return MandateTerms(
        expires_at=mandate.expires_at,
        currency=amount["currency"],
        amount_limit=amount["max"],
        payload_hash=None,
        total_amount=_budget_minor(budget, amount["currency"]) if budget is not None else None,
        # Reuse is what agent_recurrence grants: without it, the mandate approves one payment.
        total_count=recurrence.get("max_occurrences") if recurrence is not None else 1,
    )


def mandate_refusal(lease: Lease, terms: MandateTerms, *, granted_at: datetime) -> str | None:
    """None if the lease, granted at `granted_at`, approves nothing its mandate does not; else
    what it would exceed."""
    if terms.expires_at is not None and lease.expires_at > terms.expires_at:
        return f"the lease runs past the mandate's end, {format_timestamp(terms.expires_at)}"
    if terms.payload_hash is not None and lease.payload_hash != terms.payload_hash:
        return "the lease approves another payload than the checkout the mandate approves"
    if terms.currency is not None and lease.currency != terms.currency:
        return (
            f"the mandate approves {terms.currency}, the lease {lease.currency or 'any currency'}"
        )
    if terms.amount_limit is not None and terms.payload_hash is None:
        # A limit bounds the field its target declares as the amount; one on any other field
        # refuses every dispatch (gate_client.authorization), so each limit is held to this.
        bounded = list(lease.limits)
        if not bounded:
            return "the mandate bounds each payment's amount, the lease does not"
        over = [name for name in bounded if lease.limits[name] > terms.amount_limit]
        if over:
            return f"the lease's {over[0]} limit is above the mandate's {terms.amount_limit}"
    return _totals_refusal(lease, terms, granted_at)


def _totals_refusal(lease: Lease, terms: MandateTerms, granted_at: datetime) -> str | None:
    """The mandate's totals bound the lease's effects together: some budget of every agent key
    together, over a window as long as the lease, holds them to no more."""
    if terms.total_amount is None and terms.total_count is None:
        return None
    lifetime = (lease.expires_at - granted_at).total_seconds()
    for budget in lease.budgets:
        if budget.per != BudgetPer.TENANT or budget.window_seconds < lifetime:
            continue
        if _within(budget.max_amount, terms.total_amount) and _within(
            budget.max_count, terms.total_count
        ):
            return None
    return (
        f"the mandate allows {terms.total_count or 'any number of'} effects and "
        f"{terms.total_amount if terms.total_amount is not None else 'any amount'} in all; no "
        "budget of the lease holds it to that"
    )


def _within(granted: int | None, allowed: int | None) -> bool:
    return allowed is None or (granted is not None and granted <= allowed)


def check_evidence(lease_body: Mapping[str, Any], *, granted_at: datetime) -> Mandate | None:
    """The mandate a LEASE_GRANTED body carries, verified again with the keys it records as
    at the grant, and its lease within it; None for a lease granted without one."""
    evidence = lease_body.get("mandate")
    if evidence is None:
        return None
    try:
        recorded = [evidence[name] for name in ("signer", "merchant") if name in evidence]
        keys = [TrustedKey.from_body(body) for body in recorded]
        stated = [body["key_id"] for body in recorded]
        token, vct = evidence["token"], evidence["vct"]
        lease = Lease.from_body(lease_body)
    except MandateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MandateError(
            "invalid_mandate", f"mandate evidence that does not hold: {exc!r}"
        ) from exc
    if [key.key_id for key in keys] != stated:
        raise MandateError("untrusted_signature", "a key id is not the thumbprint of its key")
    mandate = verify_mandate(token, keys, now=granted_at)
    if mandate.vct != vct:
        raise MandateError("invalid_mandate", "the evidence names another mandate type")
    named = evidence.get("mandate_hash", mandate.mandate_hash)  # older grants state none
    if named != mandate.mandate_hash:
        raise MandateError("invalid_mandate", "the evidence names the mandate by another hash")
    refusal = mandate_refusal(lease, granted_terms(lease, mandate), granted_at=granted_at)
    if refusal is not None:
        raise MandateError("beyond_mandate", refusal)
    return mandate


def mandate_in_words(evidence: Mapping[str, Any]) -> list[str]:
    """The mandate a lease was granted from, as a reviewer reads it: who signed what, and its
    constraints. Read from the evidence as recorded (verified at grant, and by the verifier)."""
    signer = evidence["signer"]
    kind = _KINDS.get(evidence["vct"], evidence["vct"])
    lines = [f"{kind} signed by {signer['holder']} (user key {signer['key_id']})"]
    merchant = evidence.get("merchant")
    if merchant is not None:
        lines.append(f"checkout signed by {merchant['holder']} (merchant key {merchant['key_id']})")
    try:
        _, claims = _verified_sd_jwt(evidence["token"], [TrustedKey.from_body(signer)])
        content = _mandate_content(claims)
    except MandateError as exc:
        return [*lines, f"it does not verify: {exc.detail}"]
    for constraint in content.get("constraints", []):
        lines.append(_constraint_in_words(constraint))
    if "exp" in content:
        lines.append(f"until {format_timestamp(_moment(content['exp']))}")
    return lines


_KINDS = {OPEN_PAYMENT: "open Payment Mandate", CHECKOUT: "closed Checkout Mandate"}


def _constraint_in_words(constraint: Mapping[str, Any]) -> str:
    if constraint.get("type") == "payment.amount_range":
        low = f"from {constraint['min']} " if "min" in constraint else ""
        return (
            f"each payment {low}up to {constraint['max']} (minor units of {constraint['currency']})"
        )
    if constraint.get("type") == "payment.execution_date":
        return f"executed not after {constraint.get('not_after', '-')}"
    if constraint.get("type") == "payment.budget":
        return f"at most {constraint['max']} {constraint['currency']} in all"
    if constraint.get("type") == "payment.agent_recurrence":
        times = constraint.get("max_occurrences", "any number of")
        return f"reused on demand, {times} times in all"
    return f"constraint {constraint.get('type')!r}"


def _verified_sd_jwt(token: str, keys: Sequence[TrustedKey]) -> tuple[TrustedKey, dict[str, Any]]:
    """The key that verifies the SD-JWT's signature and its claims, disclosures resolved."""
    bad_signature = 0
    for key in keys:
        try:
            verifier = SDJWTVerifier(token, _key_of(key))
            return key, cast(dict[str, Any], verifier.get_verified_payload())
        except InvalidJWSSignature:
            bad_signature += 1
        except MandateError:
            raise
        except (*_UNREADABLE, KeyError, AttributeError) as exc:
            raise MandateError("invalid_mandate", f"not an SD-JWT: {exc!r}"[:300]) from exc
    if not keys:  # nothing to verify with: still tell garbage from an untrusted signature
        _parsed(token)
    raise MandateError(
        "untrusted_signature",
        f"no user key this tenant trusts verifies the mandate's signature ({bad_signature} tried)",
    )


def _key_of(key: TrustedKey) -> Any:
    def issuer_key(issuer: Any, header: Mapping[str, Any]) -> JWK:
        if header.get("alg") not in SIGNING_ALGS:
            raise MandateError("invalid_mandate", f"alg {header.get('alg')!r} is not ECDSA")
        return JWK(**key.jwk)

    return issuer_key


def _parsed(token: str) -> None:
    """Refuse what is not even an SD-JWT, when there is no key to try it with."""
    try:
        JWS().deserialize(token.split("~", 1)[0])
    except _UNREADABLE as exc:
        raise MandateError("invalid_mandate", f"not an SD-JWT: {exc!r}"[:300]) from exc


def _mandate_content(claims: Mapping[str, Any]) -> dict[str, Any]:
    """The one mandate the SD-JWT discloses in its delegate_payload."""
    delegated = claims.get("delegate_payload")
    if not isinstance(delegated, list):
        raise MandateError("invalid_mandate", "no delegate_payload: not an AP2 mandate")
    mandates = [m for m in delegated if isinstance(m, dict) and "vct" in m]
    if len(mandates) != 1:
        raise MandateError(
            "invalid_mandate",
            f"the delegate_payload discloses {len(mandates)} mandates: one, please",
        )
    content = mandates[0]
    if content["vct"] not in (OPEN_PAYMENT, CHECKOUT):
        raise MandateError(
            "invalid_mandate",
            f"vct {content['vct']!r}: accepted are {OPEN_PAYMENT} and {CHECKOUT}",
        )
    return content


def _moment(value: Any) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MandateError("invalid_mandate", f"a time is a Unix epoch integer, not {value!r}")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise MandateError("invalid_mandate", f"time {value} is out of range") from exc


def _expiry(claims: Mapping[str, Any], content: Mapping[str, Any]) -> datetime | None:
    """The earliest end the SD-JWT or its mandate states."""
    ends = [_moment(where["exp"]) for where in (claims, content) if "exp" in where]
    constraints = content.get("constraints")
    for constraint in constraints if isinstance(constraints, list) else []:
        if _is_constraint(constraint, "payment.execution_date") and "not_after" in constraint:
            ends.append(_iso_moment(constraint["not_after"]))
    return min(ends) if ends else None


def _is_constraint(value: Any, kind: str) -> bool:
    return isinstance(value, dict) and value.get("type") == kind


def _iso_moment(value: Any) -> datetime:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise MandateError("invalid_mandate", f"not an ISO 8601 time: {value!r}") from exc
    if moment.tzinfo is None:
        raise MandateError("invalid_mandate", f"{value!r} names no time zone")
    return moment


def _check_open_payment(content: Mapping[str, Any], now: datetime) -> None:
    """Every claim and constraint of an open Payment Mandate is one a lease enforces."""
    extra = sorted(set(content) - _OPEN_CLAIMS)
    if extra:
        raise MandateError(
            "unresolved_constraint",
            f"the mandate pre-sets {', '.join(extra)}: a lease cannot hold an effect to them",
        )
    if not isinstance(content.get("exp"), int):
        raise MandateError("invalid_mandate", "an open mandate needs an exp: a lease ends")
    constraints = content.get("constraints")
    if not isinstance(constraints, list):
        raise MandateError("invalid_mandate", "an open mandate's constraints are an array")
    for constraint in constraints:
        kind = constraint.get("type") if isinstance(constraint, dict) else None
        if kind == "payment.execution_date":
            if "not_before" in constraint and _iso_moment(constraint["not_before"]) > now:
                raise MandateError(
                    "unresolved_constraint",
                    "execution_date.not_before is in the future: a lease starts when granted",
                )
        elif kind == "payment.agent_recurrence":
            _check_recurrence(constraint)
        elif kind not in ("payment.amount_range", "payment.budget"):
            raise MandateError(
                "unresolved_constraint",
                f"constraint {kind!r} is not one a lease enforces (payment.amount_range, "
                "payment.budget, payment.agent_recurrence and payment.execution_date are)",
            )
    amount = _amount_range(constraints)
    _one_of(constraints, "payment.agent_recurrence")
    budget = _one_of(constraints, "payment.budget")
    if budget is not None:
        _budget_minor(budget, amount["currency"])


def _one_of(constraints: Sequence[Any], kind: str) -> dict[str, Any] | None:
    """The one constraint of this type, if any: two would need both to hold, which a lease's
    one budget per scope cannot say."""
    found = [c for c in constraints if _is_constraint(c, kind)]
    if len(found) > 1:
        raise MandateError("unresolved_constraint", f"{len(found)} {kind} constraints: one, please")
    return found[0] if found else None


def _check_recurrence(constraint: Mapping[str, Any]) -> None:
    """ON_DEMAND reuse, up to max_occurrences in all, is a lease budget's count. A DAILY (or
    longer) frequency also spaces the payments apart, which no lease budget says."""
    if constraint.get("frequency") != "ON_DEMAND":
        raise MandateError(
            "unresolved_constraint",
            f"agent_recurrence frequency {constraint.get('frequency')!r}: a lease enforces "
            "ON_DEMAND reuse only",
        )
    count = constraint.get("max_occurrences")
    if count is not None and not (_is_integer(count) and count >= 1):
        raise MandateError("invalid_mandate", "max_occurrences is a whole number, at least 1")


def _budget_minor(budget: Mapping[str, Any], currency: str) -> int:
    """payment.budget's max in the currency's minor units. AP2 states it in major units (its
    example: 1000.00 USD; the reference SDK evaluates max x 100 cents): converted by the
    currency's own minor unit (CLDR, via Babel), exactly, or refused."""
    maximum, named = budget.get("max"), budget.get("currency")
    if not isinstance(named, str) or named.upper() != currency:
        raise MandateError(
            "unresolved_constraint",
            f"the budget is in {named!r}, the amount range in {currency}: one currency, please",
        )
    if (
        isinstance(maximum, bool)
        or not isinstance(maximum, int | float)
        or not 0 < maximum < math.inf  # json reads Infinity and NaN too
    ):
        raise MandateError("invalid_mandate", "a budget's max is a positive number")
    minor = Decimal(str(maximum)).scaleb(get_currency_precision(currency))
    if minor > MAX_SAFE_INTEGER:
        raise MandateError("invalid_mandate", f"budget max {maximum} is out of range")
    if minor != minor.to_integral_value():
        raise MandateError(
            "invalid_mandate", f"budget max {maximum} is not whole {currency} minor units"
        )
    return int(minor)


def _amount_range(constraints: Sequence[Any]) -> dict[str, Any]:
    """The one payment.amount_range: a currency and a positive maximum in minor units. Its
    minimum, if any, must be at most 1, the least a lease's limit lets through."""
    ranges = [
        c for c in constraints if isinstance(c, dict) and c.get("type") == "payment.amount_range"
    ]
    if len(ranges) != 1:
        raise MandateError(
            "unresolved_constraint",
            "an open mandate for a lease has one payment.amount_range: each effect's limit",
        )
    found = ranges[0]
    maximum, minimum, currency = found.get("max"), found.get("min", 0), found.get("currency")
    if not (_is_integer(maximum) and _is_integer(minimum)):
        raise MandateError("invalid_mandate", "amount_range max and min are integers, minor units")
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        raise MandateError("invalid_mandate", "amount_range currency: three letters of ISO 4217")
    if maximum < 1:
        raise MandateError("invalid_mandate", "amount_range max must be at least 1")
    if minimum > 1:
        raise MandateError(
            "unresolved_constraint",
            f"amount_range min {minimum}: a lease's limit lets any amount from 1 through",
        )
    return {"max": maximum, "currency": currency.upper()}


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _checkout(
    content: Mapping[str, Any], claims: Mapping[str, Any], merchants: Sequence[TrustedKey]
) -> tuple[TrustedKey, bytes]:
    """A closed Checkout Mandate's binding: its checkout_hash is the base64url SHA-256 of its
    checkout_jwt string, a merchant the tenant trusts signed that JWT, and the JWT's payload
    is canonical JSON, the bytes of the effect's payload."""
    checkout_jwt, stated = content.get("checkout_jwt"), content.get("checkout_hash")
    if not (isinstance(checkout_jwt, str) and checkout_jwt.isascii() and isinstance(stated, str)):
        raise MandateError(
            "invalid_mandate", "a checkout mandate discloses checkout_jwt and checkout_hash"
        )
    if claims.get("_sd_alg", "sha-256") != "sha-256":
        raise MandateError("invalid_mandate", "only sha-256 binds a checkout here")
    digest = base64.urlsafe_b64encode(hashlib.sha256(checkout_jwt.encode("ascii")).digest())
    if digest.rstrip(b"=").decode() != stated:
        raise MandateError("mandate_binding", "checkout_hash is not the hash of checkout_jwt")
    merchant, payload = _merchant_signed(checkout_jwt, merchants)
    try:
        value = parse_canonical(payload)
    except CanonicalJSONError as exc:
        raise MandateError(
            "mandate_binding", f"the checkout JWT's payload is not canonical JSON: {exc}"
        ) from exc
    if not isinstance(value, dict):
        raise MandateError("mandate_binding", "the checkout JWT's payload is not an object")
    return merchant, payload


def _merchant_signed(
    checkout_jwt: str, merchants: Sequence[TrustedKey]
) -> tuple[TrustedKey, bytes]:
    """The trusted merchant key that verifies the checkout JWT, and the payload it signed."""
    jws = JWS()
    try:
        jws.deserialize(checkout_jwt)
        alg = jws.jose_header.get("alg")
    except _UNREADABLE as exc:
        raise MandateError("invalid_mandate", f"checkout_jwt is not a JWS: {exc!r}"[:300]) from exc
    if alg not in SIGNING_ALGS:
        raise MandateError("invalid_mandate", f"the checkout JWT's alg {alg!r} is not ECDSA")
    for key in merchants:
        try:
            jws.verify(JWK(**key.jwk), alg=alg)
        except InvalidJWSSignature:
            continue
        except (JWException, ValueError, TypeError) as exc:
            raise MandateError("invalid_mandate", f"checkout_jwt: {exc}") from exc
        return key, cast(bytes, jws.payload)
    raise MandateError(
        "untrusted_signature", "no merchant key this tenant trusts verifies the checkout JWT"
    )
