from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gate_client.leases import lease_states
from ledger import selectors as ledger_selectors
from notary import services
from notary.errors import NotaryInputError
from notary.models import ApiKey, Lease, Tenant
from testkit.world import dispatch_refusal

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(acme: Tenant) -> ApiKey:
    # The requester a grant names holds an agent key of the tenant.
    services.api_key_issue(tenant=acme, role="agent", holder="bob@acme.example")
    return services.api_key_issue(tenant=acme, role="approver", holder="alice@acme.example")[0]


def grant(acme: Tenant, approver: ApiKey, **changes: Any) -> Lease:
    arguments: dict[str, Any] = {
        "tenant": acme,
        "approver": approver,
        "case_id": "case_4711",
        "action": "refund",
        "expires_at": timezone.now() + timedelta(hours=1),
        "requested_by": "bob@acme.example",
        "limits": {"amount_cents": 2000},
    }
    arguments.update(changes)
    return services.lease_grant(**arguments)


def refusal_now(state: Any, *, amount_cents: int) -> tuple[str, str] | None:
    """What the gate's dispatch-time rule says of a refund on case_4711 now."""
    return dispatch_refusal(
        state,
        case_id="case_4711",
        action="refund",
        payload={"amount_cents": amount_cents},
        now=timezone.now(),
    )


def ledger_entries(tenant: Tenant) -> list[Any]:
    return list(ledger_selectors.iter_entries(log=tenant.log))


def test_a_grant_is_a_ledger_entry_the_gate_client_reads_as_a_live_lease(
    acme: Tenant, approver: ApiKey
) -> None:
    lease = grant(acme, approver)
    (entry,) = ledger_entries(acme)
    assert (entry.kind, entry.seq) == ("LEASE_GRANTED", lease.granted_seq)
    assert entry.body_value()["requested_by"] == "bob@acme.example"
    assert entry.body_value()["granted_by"] == "alice@acme.example"
    state = lease_states(ledger_entries(acme))[lease.lease_id]
    assert refusal_now(state, amount_cents=2000) is None


def test_a_revocation_is_recorded_once_and_ends_the_lease(acme: Tenant, approver: ApiKey) -> None:
    lease = grant(acme, approver)
    revoked = services.lease_revoke(
        tenant=acme, lease_id=lease.lease_id, by="carol@acme.example", reason=" disputed\r\n"
    )
    again = services.lease_revoke(tenant=acme, lease_id=lease.lease_id, by="x", reason="y")
    assert (revoked.seq, again.seq) == (1, None)
    assert again.lease.revoked_seq == revoked.lease.revoked_seq == 1
    assert again.lease.revoked_reason == "disputed"
    assert [e.kind for e in ledger_entries(acme)] == ["LEASE_GRANTED", "LEASE_REVOKED"]
    assert ledger_entries(acme)[1].body_value() == {
        "lease_id": lease.lease_id,
        "by": "carol@acme.example",
        "reason": "disputed",
    }
    state = lease_states(ledger_entries(acme))[lease.lease_id]
    refusal = refusal_now(state, amount_cents=1)
    assert refusal is not None and refusal[0] == "lease_revoked"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"requested_by": "alice@acme.example"}, "cannot also approve it"),
        ({"expires_at": timezone.now() - timedelta(seconds=1)}, "in the future"),
        ({"case_id": ""}, "case_id"),
        ({"limits": {"amount_cents": -1}}, "positive integer"),
        ({"limits": {"amount_cents": 0}}, "positive integer"),
        ({"limits": {"amount_cents": 20.5}}, "positive integer"),
        ({"payload_hash": "ABC"}, "64 lowercase hex"),
    ],
)
def test_bad_grants_are_refused_and_write_nothing(
    acme: Tenant, approver: ApiKey, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(NotaryInputError, match=message):
        grant(acme, approver, **changes)
    assert ledger_entries(acme) == []
    assert not Lease.objects.exists()


def test_only_an_approver_of_the_same_tenant_grants(acme: Tenant, approver: ApiKey) -> None:
    agent = services.api_key_issue(tenant=acme, role="agent", holder="refund-bot")[0]
    globex = services.tenant_create(slug="globex", name="Globex")
    stranger = services.api_key_issue(tenant=globex, role="approver", holder="eve@globex.example")[
        0
    ]
    for key in (agent, stranger):
        with pytest.raises(NotaryInputError, match="only an approver"):
            grant(acme, key)
    with pytest.raises(NotaryInputError, match="no lease"):
        services.lease_revoke(
            tenant=globex, lease_id=grant(acme, approver).lease_id, by="e", reason="r"
        )
    assert ledger_entries(globex) == []


@pytest.mark.parametrize(
    ("reason", "refused"),
    [
        (" \n\t", "must be a non-empty string"),
        ("x" * (services.MAX_REVOCATION_REASON + 1), "longer than 500 characters"),
        ("disputed\x00", "control character"),
    ],
)
def test_a_revocation_without_a_usable_reason_writes_nothing(
    acme: Tenant, approver: ApiKey, reason: str, refused: str
) -> None:
    lease = grant(acme, approver)
    with pytest.raises(NotaryInputError, match=refused):
        services.lease_revoke(tenant=acme, lease_id=lease.lease_id, by="carol", reason=reason)
    assert [e.kind for e in ledger_entries(acme)] == ["LEASE_GRANTED"]
    assert Lease.objects.get(pk=lease.pk).revoked_at is None


def test_a_reason_may_run_over_several_lines(acme: Tenant, approver: ApiKey) -> None:
    lease = grant(acme, approver)
    reason = "Disputed by the customer.\r\nTicket 4711:\tsee the call notes."
    revoked = services.lease_revoke(tenant=acme, lease_id=lease.lease_id, by="c", reason=reason)
    assert ledger_entries(acme)[1].body_value()["reason"] == reason
    assert revoked.lease.revoked_reason == reason


def test_a_lease_in_a_currency_approves_payloads_in_it_only(acme: Tenant, approver: ApiKey) -> None:
    """Granted as "usd", recorded as USD in the entry and the row; the dispatch-time rule the
    notary applies refuses a yen or currency-less refund under it, at the limit or not."""
    lease = grant(acme, approver, currency="usd")
    assert lease.currency == "USD"
    [entry] = list(ledger_selectors.iter_entries(log=acme.log))
    assert entry.body_value()["currency"] == "USD"
    live = lease_states([entry])[lease.lease_id]  # as the receipt replays it
    assert live.lease.currency == "USD"

    def dispatch(payload: dict[str, Any]) -> tuple[str, str] | None:
        return dispatch_refusal(
            live, case_id="case_4711", action="refund", payload=payload, now=timezone.now()
        )

    assert dispatch({"amount_cents": 2000, "currency": "usd"}) is None
    assert dispatch({"amount_cents": 2000, "currency": "jpy"}) == (
        "lease_scope",
        "the payload is in JPY, the lease approves USD",
    )
    assert dispatch({"amount_cents": 1500})[0] == "lease_scope"  # type: ignore[index]


@pytest.mark.parametrize("currency", ["dollars", "US", "U$D", "12"])
def test_a_currency_that_is_not_three_letters_is_refused(
    acme: Tenant, approver: ApiKey, currency: str
) -> None:
    with pytest.raises(NotaryInputError, match="currency: three letters of ISO 4217"):
        grant(acme, approver, currency=currency)
    assert Lease.objects.count() == 0
    assert list(ledger_selectors.iter_entries(log=acme.log)) == []
