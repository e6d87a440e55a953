"""AP2 v0.2 mandates, made and signed with real keys by the sd-jwt reference implementation and
jwcrypto, verified against the keys a tenant trusts and read as the most a lease may approve:
an open Payment Mandate bounds each effect's amount, its currency and the lease's end; a closed
Checkout Mandate binds exactly one payload; everything else is refused, never dropped."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jwcrypto.jwk import JWK
from jwcrypto.jws import JWS

from gate_client.authorization import DispatchRequest, Refuse, authorize
from gate_client.budgets import Budget, BudgetPer, Spent, Total
from gate_client.leases import Lease, LeaseState
from gate_client.mandates import (
    CHECKOUT,
    OPEN_PAYMENT,
    MandateError,
    TrustedKey,
    check_evidence,
    mandate_hash,
    mandate_in_words,
    mandate_terms,
    regrant_refusal,
    trusted_key,
    verify_mandate,
)
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Proposal
from gate_client.protocol import TargetDeclaration
from gate_client.targets import Tier
from testkit.mandates import (
    amount_range,
    checkout_hash,
    checkout_jwt,
    checkout_mandate,
    new_key,
    open_payment_mandate,
    public_jwk,
    respelled,
    sd_jwt,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
END = NOW + timedelta(days=7)
REFUND = {"amount": 1999, "charge": "ch_1", "currency": "usd"}
REFUND_DECLARATION = TargetDeclaration(
    Tier.DEDUPES, True, timedelta(seconds=30), money=MoneyDeclaration("amount", "currency")
)
ON_DEMAND = {"type": "payment.agent_recurrence", "frequency": "ON_DEMAND", "max_occurrences": 100}


@pytest.fixture(scope="module")
def user() -> JWK:
    return new_key()


@pytest.fixture(scope="module")
def merchant() -> JWK:
    return new_key()


@pytest.fixture(scope="module")
def keys(user: JWK, merchant: JWK) -> list[TrustedKey]:
    return [
        trusted_key(public_jwk(user), role="user", holder="Finance Lead"),
        trusted_key(public_jwk(merchant), role="merchant", holder="Acme Shop"),
    ]


def refused(token: Any, keys: list[TrustedKey], now: datetime = NOW) -> MandateError:
    with pytest.raises(MandateError) as caught:
        verify_mandate(token, keys, now=now)
    return caught.value


def test_an_open_payment_mandate_is_a_standing_lease_s_ceiling(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(
        user, expires_at=END, constraints=[amount_range(5000, "usd", minimum=1)]
    )
    mandate = verify_mandate(token, keys, now=NOW)
    assert (mandate.vct, mandate.signer.holder, mandate.token) == (
        OPEN_PAYMENT,
        "Finance Lead",
        token,
    )
    terms = mandate_terms(mandate)
    assert (terms.amount_limit, terms.currency, terms.expires_at, terms.payload_hash) == (
        5000,
        "USD",
        END.replace(microsecond=0),
        None,
    )
    # No agent_recurrence: AP2's open mandate approves one payment, so the lease one effect.
    assert (terms.total_amount, terms.total_count) == (None, 1)
    assert terms.budget(granted_at=NOW) == Budget(BudgetPer.TENANT, 7 * 24 * 3600, None, 1)


@pytest.mark.parametrize(
    ("budget", "recurrence", "totals"),
    [
        ({"max": 2000.00, "currency": "USD"}, ON_DEMAND, (200000, 100)),
        ({"max": 20.5, "currency": "usd"}, {**ON_DEMAND, "max_occurrences": 3}, (2050, 3)),
        (
            {"max": 2000, "currency": "USD"},
            {"type": "payment.agent_recurrence", "frequency": "ON_DEMAND"},
            (200000, None),
        ),
        (None, ON_DEMAND, (None, 100)),
    ],
)
def test_the_mandate_s_totals_are_a_budget_over_the_lease_s_life(
    user: JWK,
    keys: list[TrustedKey],
    budget: dict[str, Any] | None,
    recurrence: dict[str, Any],
    totals: tuple[int | None, int | None],
) -> None:
    constraints = [amount_range(5000), recurrence]
    if budget is not None:
        constraints.append({"type": "payment.budget", **budget})
    token = open_payment_mandate(user, expires_at=END, constraints=constraints)
    terms = mandate_terms(verify_mandate(token, keys, now=NOW))
    assert (terms.total_amount, terms.total_count) == totals
    window = terms.budget(granted_at=NOW - timedelta(milliseconds=1))
    assert window is not None and window.window_seconds == 7 * 24 * 3600 + 1


def test_a_budget_counts_in_its_currency_s_own_minor_unit(
    user: JWK, keys: list[TrustedKey]
) -> None:
    yen = [
        amount_range(5000, "JPY"),
        ON_DEMAND,
        {"type": "payment.budget", "max": 20000, "currency": "JPY"},
    ]
    token = open_payment_mandate(user, expires_at=END, constraints=yen)
    assert mandate_terms(verify_mandate(token, keys, now=NOW)).total_amount == 20000
    cents = [
        amount_range(5000),
        ON_DEMAND,
        {"type": "payment.budget", "max": 10.005, "currency": "USD"},
    ]
    token = open_payment_mandate(user, expires_at=END, constraints=cents)
    assert refused(token, keys).code == "invalid_mandate"


def test_the_signer_is_the_key_that_verifies_never_the_name_the_token_gives(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    content = {
        "vct": OPEN_PAYMENT,
        "constraints": [amount_range(5000)],
        "cnf": {"jwk": public_jwk(new_key())},
        "exp": int(END.timestamp()),
    }
    # A merchant's key names itself the user; only a user key may sign a mandate.
    claimed = sd_jwt(merchant, content, iss="Finance Lead")
    assert refused(claimed, keys).code == "untrusted_signature"
    assert verify_mandate(sd_jwt(user, content, iss="someone"), keys, now=NOW).signer == keys[0]


def test_an_execution_date_ends_the_mandate_early(user: JWK, keys: list[TrustedKey]) -> None:
    not_after = NOW + timedelta(days=2)
    token = open_payment_mandate(
        user,
        expires_at=END,
        constraints=[
            amount_range(5000),
            {"type": "payment.execution_date", "not_after": not_after.isoformat()},
        ],
    )
    assert mandate_terms(verify_mandate(token, keys, now=NOW)).expires_at == not_after


def test_a_checkout_mandate_binds_exactly_its_payload(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    mandate = verify_mandate(checkout_mandate(user, checkout_jwt(merchant, REFUND)), keys, now=NOW)
    assert (mandate.vct, mandate.merchant) == (CHECKOUT, keys[1])
    terms = mandate_terms(mandate)
    approved = Proposal("case-1", "payments", "refund", REFUND, "lease_1")
    assert terms.payload_hash == approved.payload_hash
    assert (terms.amount_limit, terms.currency, terms.total_count) == (1999, "USD", 1)
    lease = Lease(
        "lease_1",
        "case-1",
        "refund",
        END,
        "maria",
        limits={"amount": 1999},
        payload_hash=terms.payload_hash,
        currency="USD",
    )
    one_byte = {**REFUND, "charge": "ch_2"}
    other = Proposal("case-1", "payments", "refund", one_byte, "lease_1")
    assert len(other.payload_bytes) == len(approved.payload_bytes)

    def refusal(proposal: Proposal) -> tuple[str, str] | None:
        decision = authorize(
            request=DispatchRequest.of_proposal(
                "e1", proposal.proposed_body([], REFUND_DECLARATION), 1, [], False
            ),
            lease=LeaseState(lease),
            now=NOW,
            spender="",
            spent_for=lambda budget: Spent(),
            hold=lambda: None,
        )
        return (decision.reason, decision.detail) if isinstance(decision, Refuse) else None

    assert refusal(approved) is None
    assert refusal(other) == ("lease_scope", "lease approves another payload")


def test_a_checkout_hash_that_is_not_its_checkout_s_is_refused(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    jwt = checkout_jwt(merchant, REFUND)
    other = checkout_jwt(merchant, {**REFUND, "amount": 2000})
    token = checkout_mandate(user, jwt, stated_hash=checkout_hash(other))
    assert refused(token, keys).code == "mandate_binding"


def test_a_checkout_from_a_merchant_not_trusted_is_refused(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = checkout_mandate(user, checkout_jwt(new_key(), REFUND))
    error = refused(token, keys)
    assert (error.code, error.detail) == (
        "untrusted_signature",
        "no merchant key this tenant trusts verifies the checkout JWT",
    )


def test_a_checkout_whose_payload_is_not_canonical_json_is_refused(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    jws = JWS(json.dumps(REFUND, indent=1).encode())
    jws.add_signature(merchant, alg="ES256", protected=json.dumps({"alg": "ES256"}))
    token = checkout_mandate(user, jws.serialize(compact=True))
    assert refused(token, keys).code == "mandate_binding"


def test_a_bad_signature_an_unknown_key_and_an_expired_mandate_are_refused(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    header, payload, signature = token.split("~", 1)[0].split(".")
    flipped = "A" if signature[0] != "A" else "B"
    bad = ".".join([header, payload, flipped + signature[1:]]) + "~" + token.split("~", 1)[1]
    assert refused(bad, keys).code == "untrusted_signature"
    assert refused(token, [keys[1]]).code == "untrusted_signature"  # no user key at all
    other = trusted_key(public_jwk(new_key()), role="user", holder="Someone Else")
    assert refused(token, [other]).code == "untrusted_signature"
    expired = refused(token, keys, now=END)
    assert (expired.code, expired.detail) == (
        "mandate_expired",
        f"the mandate expired at {END.replace(microsecond=0):%Y-%m-%dT%H:%M:%S}.000000Z",
    )


def test_a_changed_disclosure_is_not_a_mandate(user: JWK, keys: list[TrustedKey]) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    jwt, disclosure, _ = token.split("~")
    salt, content = json.loads(base64.urlsafe_b64decode(disclosure + "=="))
    content["constraints"] = [amount_range(500000)]
    forged = base64.urlsafe_b64encode(json.dumps([salt, content]).encode()).decode().rstrip("=")
    error = refused(f"{jwt}~{forged}~", keys)
    assert (error.code, error.detail) == (
        "invalid_mandate",
        "the delegate_payload discloses 0 mandates: one, please",
    )


@pytest.mark.parametrize(
    "garbage",
    [None, 42, "", "~", "not a token~", "a.b.c~", "é~", "x" * 70000 + "~", {"token": "x"}],
)
def test_garbage_is_an_invalid_mandate(garbage: Any, keys: list[TrustedKey]) -> None:
    assert refused(garbage, keys).code == "invalid_mandate"


@pytest.mark.parametrize(
    "content",
    [
        {"vct": OPEN_PAYMENT, "constraints": 5, "exp": 2_000_000_000},
        {"vct": OPEN_PAYMENT, "constraints": ["x", None], "exp": 2_000_000_000},
        {"vct": OPEN_PAYMENT, "constraints": [amount_range(5000)], "exp": 10**30},
        {"vct": OPEN_PAYMENT, "constraints": [amount_range(5000)], "exp": "tomorrow"},
        {
            "vct": OPEN_PAYMENT,
            "constraints": [
                amount_range(5000),
                ON_DEMAND,
                {"type": "payment.budget", "max": 1e300, "currency": "USD"},
            ],
            "exp": 2_000_000_000,
        },
        {"vct": CHECKOUT, "checkout_jwt": "é.é.é", "checkout_hash": "x"},
        {"vct": CHECKOUT, "checkout_jwt": "[[[[", "checkout_hash": "x"},
        {"vct": ["a"], "exp": 2_000_000_000},
    ],
)
def test_a_signed_mandate_with_hostile_content_is_refused_not_an_error(
    user: JWK, keys: list[TrustedKey], content: dict[str, Any]
) -> None:
    assert refused(sd_jwt(user, content), keys).code in {
        "invalid_mandate",
        "unresolved_constraint",
        "mandate_binding",
    }


def test_a_disclosure_nested_past_the_parser_s_stack_is_garbage(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    deep = base64.urlsafe_b64encode(b"[" * 200_000).decode().rstrip("=")
    jwt = token.split("~", 1)[0]
    assert refused(f"{jwt}~{deep[:60_000]}~", keys).code == "invalid_mandate"


def test_a_delegation_chain_or_a_key_bound_presentation_is_not_accepted(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    assert refused(token + "~" + token, keys).code == "invalid_mandate"
    assert refused(token + "eyJhbGciOiJFUzI1NiJ9.e30.c2ln", keys).code == "invalid_mandate"


@pytest.mark.parametrize(
    ("constraints", "content"),
    [
        ([amount_range(5000), {"type": "payment.budget", "max": 20, "currency": "EUR"}], {}),
        ([amount_range(5000), {"type": "payment.agent_recurrence", "frequency": "DAILY"}], {}),
        ([amount_range(5000), ON_DEMAND, ON_DEMAND], {}),
        ([amount_range(5000), {"type": "payment.allowed_payees", "allowed": []}], {}),
        (
            [amount_range(5000), {"type": "payment.reference", "conditional_transaction_id": "x"}],
            {},
        ),
        ([amount_range(5000), {"type": "com.example.unknown"}], {}),
        ([amount_range(5000, minimum=100)], {}),
        ([], {}),
        ([amount_range(5000), amount_range(4000)], {}),
        ([amount_range(5000)], {"payment_amount": {"amount": 100, "currency": "USD"}}),
        (
            [
                amount_range(5000),
                {"type": "payment.execution_date", "not_before": "2026-06-01T00:00:00Z"},
            ],
            {},
        ),
    ],
)
def test_a_constraint_a_lease_cannot_enforce_is_refused_never_dropped(
    user: JWK, keys: list[TrustedKey], constraints: list[dict[str, Any]], content: dict[str, Any]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=constraints, **content)
    assert refused(token, keys).code == "unresolved_constraint"


def test_another_vct_is_not_accepted(user: JWK, keys: list[TrustedKey]) -> None:
    token = sd_jwt(user, {"vct": "mandate.payment.1", "exp": int(END.timestamp())})
    assert refused(token, keys).code == "invalid_mandate"


def test_a_private_key_is_never_trusted(user: JWK) -> None:
    with pytest.raises(MandateError):
        trusted_key(json.loads(user.export_private()), role="user", holder="Finance Lead")
    with pytest.raises(MandateError):
        trusted_key(public_jwk(user), role="bank", holder="Finance Lead")


ONE_EFFECT = (Budget(BudgetPer.TENANT, 7 * 24 * 3600, None, 1),)


def lease_body(token_terms: dict[str, Any], evidence: dict[str, Any]) -> dict[str, Any]:
    terms = {"budgets": ONE_EFFECT, **token_terms}
    lease = Lease("lease_1", "", "refund", END, "maria", case_class="refunds", **terms)
    return {**lease.body(), "requested_by": "refund-bot", "mandate": evidence}


def test_the_evidence_verifies_again_offline_and_its_lease_stays_within_it(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    evidence = verify_mandate(token, keys, now=NOW).evidence()
    assert json.loads(json.dumps(evidence)) == evidence  # it goes into the ledger as JSON
    within = {"limits": {"amount": 5000}, "currency": "USD"}
    assert check_evidence(lease_body(within, evidence), granted_at=NOW) is not None
    assert check_evidence({"lease_id": "lease_2"}, granted_at=NOW) is None
    over = {"limits": {"amount": 5001}, "currency": "USD"}
    with pytest.raises(MandateError, match="above the mandate's 5000"):
        check_evidence(lease_body(over, evidence), granted_at=NOW)
    with pytest.raises(MandateError, match="the mandate approves USD"):
        check_evidence(lease_body({"limits": {"amount": 10}}, evidence), granted_at=NOW)
    later = {**lease_body(within, evidence), "expires_at": "2026-06-01T00:00:00.000000Z"}
    with pytest.raises(MandateError, match="runs past the mandate's end"):
        check_evidence(later, granted_at=NOW)
    for budgets in [
        (),
        (Budget(BudgetPer.TENANT, 3600, None, 1),),
        (Budget(BudgetPer.AGENT_KEY, 7 * 24 * 3600, None, 1),),
        (Budget(BudgetPer.TENANT, 7 * 24 * 3600, None, 2),),
    ]:
        with pytest.raises(MandateError, match="no budget of the lease holds it"):
            check_evidence(lease_body({**within, "budgets": budgets}, evidence), granted_at=NOW)


def test_evidence_with_a_swapped_key_does_not_verify(user: JWK, keys: list[TrustedKey]) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    evidence = verify_mandate(token, keys, now=NOW).evidence()
    impostor = trusted_key(public_jwk(new_key()), role="user", holder="Finance Lead")
    within = {"limits": {"amount": 5000}, "currency": "USD"}
    swapped = {**evidence, "signer": {**impostor.body(), "key_id": keys[0].key_id}}
    with pytest.raises(MandateError, match="not the thumbprint"):
        check_evidence(lease_body(within, swapped), granted_at=NOW)
    with pytest.raises(MandateError) as caught:
        check_evidence(lease_body(within, {**evidence, "signer": impostor.body()}), granted_at=NOW)
    assert caught.value.code == "untrusted_signature"


def test_the_mandate_in_words(user: JWK, merchant: JWK, keys: list[TrustedKey]) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    words = mandate_in_words(verify_mandate(token, keys, now=NOW).evidence())
    assert words == [
        f"open Payment Mandate signed by Finance Lead (user key {keys[0].key_id})",
        "each payment from 0 up to 5000 (minor units of USD)",
        f"until {END.replace(microsecond=0):%Y-%m-%dT%H:%M:%S}.000000Z",
    ]
    cart = verify_mandate(checkout_mandate(user, checkout_jwt(merchant, REFUND)), keys, now=NOW)
    assert mandate_in_words(cart.evidence())[1] == (
        f"checkout signed by Acme Shop (merchant key {keys[1].key_id})"
    )


def test_a_mandate_is_named_by_what_its_signer_signed_however_it_is_spelled(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    """Another valid signature and the disclosures in another order are the same mandate; the
    same content signed again (a new salt, a new signature) is another."""
    checkout = checkout_mandate(user, checkout_jwt(merchant, REFUND), expires_at=END)
    one = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    for token in (checkout, one):
        first, again = (verify_mandate(t, keys, now=NOW) for t in (token, respelled(token)))
        assert again.token != first.token
        assert again.mandate_hash == first.mandate_hash == mandate_hash(token)
        assert again.evidence()["mandate_hash"] == first.mandate_hash
    signed_again = checkout_mandate(user, checkout_jwt(merchant, REFUND), expires_at=END)
    assert mandate_hash(signed_again) != mandate_hash(checkout)


def test_a_one_payment_or_checkout_mandate_grants_once_an_open_one_again(
    user: JWK, merchant: JWK, keys: list[TrustedKey]
) -> None:
    def mandate(token: str) -> Any:
        return verify_mandate(token, keys, now=NOW)

    checkout = mandate(checkout_mandate(user, checkout_jwt(merchant, REFUND), expires_at=END))
    one = mandate(open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)]))
    once = {**ON_DEMAND, "max_occurrences": 1}
    one_use = mandate(
        open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000), once])
    )
    recurring = mandate(
        open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000), ON_DEMAND])
    )
    for single in (checkout, one, one_use):
        terms = mandate_terms(single)
        assert regrant_refusal(single, terms, []) is None
        refusal = regrant_refusal(single, terms, ["lease_1", "lease_2"])
        assert refusal is not None and refusal.endswith("was granted already, to lease_1")
    assert regrant_refusal(recurring, mandate_terms(recurring), ["lease_1"]) is None
    assert mandate_terms(recurring).total == Total(None, 100)


def test_evidence_naming_its_mandate_by_another_hash_does_not_verify(
    user: JWK, keys: list[TrustedKey]
) -> None:
    token = open_payment_mandate(user, expires_at=END, constraints=[amount_range(5000)])
    evidence = verify_mandate(token, keys, now=NOW).evidence()
    within = {"limits": {"amount": 5000}, "currency": "USD"}
    older = {k: v for k, v in evidence.items() if k != "mandate_hash"}  # granted before hashes
    assert check_evidence(lease_body(within, older), granted_at=NOW) is not None
    other = {**evidence, "mandate_hash": "0" * 64}
    with pytest.raises(MandateError, match="by another hash"):
        check_evidence(lease_body(within, other), granted_at=NOW)
