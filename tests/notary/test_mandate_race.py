"""One AP2 mandate granted by six approvals at once, over HTTP through gunicorn, each from a
separate client process released together, half of them spelling the mandate otherwise (its
other ECDSA signature, its disclosures reordered): a one-payment or Checkout Mandate makes one
lease, whatever the interleaving, and every other grant is refused mandate_spent."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gate_client.mandates import mandate_hash
from ledger.core.entries import EntryKind
from ledger.models import Entry as LedgerEntry
from notary import services
from notary.mandates import mandate_key_trust
from notary.models import Lease
from testkit.mandates import (
    amount_range,
    checkout_jwt,
    checkout_mandate,
    new_key,
    open_payment_mandate,
    public_jwk,
    respelled,
)
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.racers import racers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

APPROVALS = 6
REFUND = {"amount": 1999, "charge": "ch_1", "currency": "USD"}


@pytest.fixture(scope="module")
def notary_url(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("mandate_race")
    with django_db_blocker.unblock():
        database_url = child_database_url()
    with running_notary(database_url, directory, workers=2, threads=4) as url:
        yield url


def test_six_approvals_of_one_mandate_at_once_grant_one_lease(notary_url: str) -> None:
    tenant = services.tenant_create(slug=f"mandates-{secrets.token_hex(4)}", name="mandate race")
    user, merchant = new_key(), new_key()
    mandate_key_trust(tenant=tenant, jwk=public_jwk(user), role="user", holder="finance lead")
    mandate_key_trust(tenant=tenant, jwk=public_jwk(merchant), role="merchant", holder="shop")
    services.api_key_issue(tenant=tenant, role="agent", holder="refund-bot")
    tokens = [
        services.api_key_issue(tenant=tenant, role="approver", holder=f"approver-{n}")[1]
        for n in range(APPROVALS)
    ]
    ends = timezone.now() + timedelta(days=7)
    one_payment = open_payment_mandate(user, expires_at=ends, constraints=[amount_range(5000)])
    cart = checkout_mandate(user, checkout_jwt(merchant, REFUND), expires_at=ends)
    with racers(notary_url, tokens) as clients:
        for token in (one_payment, cart):
            answers = clients.race(
                [
                    {
                        "method": "POST",
                        "path": "/v1/leases/from-mandate",
                        "json": {
                            "mandate": token if n % 2 else respelled(token),
                            "action": "refund",
                            "requested_by": "refund-bot",
                            "case_id": f"case-{n}",
                        },
                    }
                    for n in range(APPROVALS)
                ]
            )
            granted = [a for a in answers if a["status"] == 201]
            assert len(granted) == 1, answers
            refused = [a for a in answers if a not in granted]
            assert {(a["status"], a["body"]["error"]) for a in refused} == {
                (409, "mandate_spent")
            }, refused
            assert {a["body"]["lease_id"] for a in refused} == {granted[0]["body"]["lease_id"]}
            leases = Lease.objects.filter(tenant=tenant, mandate_hash=mandate_hash(token))
            assert list(leases.values_list("lease_id", flat=True)) == [
                granted[0]["body"]["lease_id"]
            ]
    grants = LedgerEntry.objects.filter(log=tenant.log, kind=EntryKind.LEASE_GRANTED)
    assert grants.count() == 2
