"""Issue 16, item 6 (the projection half): the Effect table, the review queue's source, has no
trigger, so an edited or deleted row is not refused; verify_ledger (through
settings.LEDGER_VERIFY_CHECKS) and rebuild_effects --check name it, and rebuild_effects puts
the ledger's rows back."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.core.note import Signer
from notary.models import Effect, Tenant
from testkit.factories import dispatched, register

pytestmark = pytest.mark.django_db


def run(command: str, **options: object) -> str:
    out = io.StringIO()
    call_command(command, stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def effect_id(acme: Tenant, signer: Signer) -> str:
    register(acme, "refunds")
    made = dispatched(acme, "refunds", "case-1")
    assert run("verify_ledger", log=acme.log.origin, no_progress=True).startswith("OK ")
    assert run("rebuild_effects", tenant="acme", check=True) == (
        "acme: the effects table is the ledger's\nacme: the findings table is the ledger's\n"
    )
    return made


def test_an_edited_effect_row_is_named_and_rebuilt(acme: Tenant, effect_id: str) -> None:
    state = Effect.objects.get(effect_id=effect_id).state
    Effect.objects.filter(effect_id=effect_id).update(state="COMMITTED", contradicted=False)
    with pytest.raises(CommandError) as failure:
        run("verify_ledger", log=acme.log.origin, no_progress=True)
    assert str(failure.value) == (
        f"FAIL: acme: effect {effect_id}: the effects table differs from the ledger in "
        f"state ('COMMITTED', ledger {state!r})"
    )
    with pytest.raises(CommandError, match="differs from the ledger for acme"):
        run("rebuild_effects", tenant="acme", check=True)
    assert Effect.objects.get(effect_id=effect_id).state == "COMMITTED"  # --check wrote nothing
    run("rebuild_effects", tenant="acme")
    assert Effect.objects.get(effect_id=effect_id).state == state
    assert run("verify_ledger", log=acme.log.origin, no_progress=True).startswith("OK ")


def test_a_deleted_effect_row_is_named(acme: Tenant, effect_id: str) -> None:
    """Emptying the review queue by deleting its rows."""
    Effect.objects.filter(effect_id=effect_id).delete()
    with pytest.raises(CommandError) as failure:
        run("verify_ledger", log=acme.log.origin, no_progress=True)
    assert str(failure.value) == (
        f"FAIL: acme: effect {effect_id}: in the ledger, missing from the effects table"
    )
