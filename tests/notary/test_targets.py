from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from notary import services
from notary.errors import NotaryInputError
from notary.models import Target, Tenant, Tier

pytestmark = pytest.mark.django_db

SECOND = timedelta(seconds=1)


@pytest.fixture
def acme() -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


def test_targets_of_each_tier_are_registered_per_tenant(acme: Tenant) -> None:
    stripe = services.target_register(
        tenant=acme,
        name="stripe",
        tier=1,
        queryable=True,
        max_inflight=30 * SECOND,
        key_window=timedelta(hours=24),
    )
    ledger_db = services.target_register(
        tenant=acme,
        name="ledger-db",
        tier=2,
        queryable=True,
        max_inflight=5 * SECOND,
        lookup_url="http://ledger.internal/effects",
    )
    mail = services.target_register(
        tenant=acme,
        name="mail",
        tier=3,
        queryable=False,
        max_inflight=60 * SECOND,
        evidence_window=timedelta(hours=24),
    )
    assert [t.tier for t in (stripe, ledger_db, mail)] == [Tier.DEDUPES, Tier.LOOKUP, Tier.NEITHER]
    other = services.tenant_create(slug="globex", name="Globex")
    services.target_register(
        tenant=other, name="stripe", tier=1, queryable=False, max_inflight=SECOND
    )
    assert Target.objects.filter(name="stripe").count() == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Stripe!"}, "target name"),
        ({"tier": 4}, "tier"),
        ({"tier": 2, "queryable": False}, "queryable must be true"),
        ({"tier": 3, "key_window": timedelta(hours=24)}, "only a tier-1 target"),
        ({"max_inflight": timedelta(0)}, "max_inflight must be positive"),
        ({"evidence_window": -SECOND}, "evidence_window must be positive"),
        ({"name": "taken"}, "exists already"),
    ],
)
def test_contradictory_claims_are_refused_and_store_nothing(
    acme: Tenant, changes: dict[str, Any], message: str
) -> None:
    services.target_register(
        tenant=acme, name="taken", tier=3, queryable=False, max_inflight=SECOND
    )
    arguments: dict[str, Any] = {
        "tenant": acme,
        "name": "new",
        "tier": 1,
        "queryable": True,
        "max_inflight": SECOND,
    }
    arguments.update(changes)
    with pytest.raises(NotaryInputError, match=message):
        services.target_register(**arguments)
    assert list(Target.objects.values_list("name", flat=True)) == ["taken"]


def test_the_database_holds_the_same_rules(acme: Tenant) -> None:
    for fields in (
        {"tier": 2, "queryable": False},
        {"tier": 3, "queryable": False, "key_window": SECOND},
        {"tier": 7, "queryable": False},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            Target.objects.create(tenant=acme, name="x", max_inflight=SECOND, **fields)
