"""The sentence on an effect's page says, in words a finance person reads, what its state means."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import EntryKind
from ledger.selectors import effect_entries
from notary import selectors, services
from notary.errors import NotaryConflict, NotaryInputError
from notary.models import Effect, Tenant
from testkit.factories import dispatched, register

pytestmark = pytest.mark.django_db


def sentence(effect_id: str) -> str:
    return selectors.effect_review(effect=Effect.objects.get(effect_id=effect_id)).sentence


@pytest.fixture
def mail(acme: Tenant) -> Tenant:
    register(acme, "mail", evidence_window=timedelta(hours=24), max_inflight=timedelta(seconds=1))
    return acme


def test_each_ending_reads_plainly(mail: Tenant) -> None:
    sent = dispatched(mail, "mail", "case-1")
    assert sentence(sent) == "In progress: sent to mail, and the answer has not been recorded yet."
    services.effect_record_outcome(
        tenant=mail,
        effect_id=sent,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "msg_1", "recheck": None},
    )
    assert sentence(sent) == "Sent once: mail confirmed it (msg_1)."

    attested = dispatched(mail, "mail", "case-2")
    observed, _ = services.attestation_record(
        tenant=mail, by="erp", effect_id=attested, stage="performed", reference="doc_7", detail=""
    )
    assert sentence(attested) == (
        f"Sent once: mail confirmed it with a statement from erp (ledger entry {observed.seq})."
    )

    refused = dispatched(mail, "mail", "case-3")
    services.effect_record_outcome(
        tenant=mail,
        effect_id=refused,
        kind="REFUSED",
        body={"reason": "lease_revoked_at_recovery", "recheck": None},
    )
    assert sentence(refused) == (
        "Not sent: the approval was withdrawn before it could be sent when it was checked again "
        "after an interruption."
    )

    bounced = dispatched(mail, "mail", "case-4")
    services.effect_record_outcome(
        tenant=mail, effect_id=bounced, kind="FAILED", body={"attempt": 1, "code": "bounced"}
    )
    assert sentence(bounced) == "Not done: mail refused it (bounced)."

    decided = dispatched(mail, "mail", "case-5")
    services.effect_record_outcome(tenant=mail, effect_id=decided, kind="AMBIGUOUS", body={})
    services.effect_resolve(
        tenant=mail, effect_id=decided, happened=True, reason="seen in the outbox", by="fiona"
    )
    assert sentence(decided) == "Decided by fiona: it happened. Their reason: seen in the outbox"


def test_only_an_ambiguous_effect_is_resolved_and_only_with_a_reason(mail: Tenant) -> None:
    open_effect = dispatched(mail, "mail", "case-1")
    with pytest.raises(NotaryConflict, match="only an AMBIGUOUS or contradicted effect"):
        services.effect_resolve(
            tenant=mail, effect_id=open_effect, happened=True, reason="x", by="fiona"
        )
    services.effect_record_outcome(tenant=mail, effect_id=open_effect, kind="AMBIGUOUS", body={})
    with pytest.raises(NotaryInputError, match="reason"):
        services.effect_resolve(
            tenant=mail, effect_id=open_effect, happened=True, reason=" ", by="fiona"
        )
    services.effect_resolve(
        tenant=mail, effect_id=open_effect, happened=False, reason="not in the outbox", by="fiona"
    )
    _, settled = services.attestation_record(
        tenant=mail, by="erp", effect_id=open_effect, stage="performed", reference="", detail=""
    )
    # Evidence after a person's decision never moves it; it sends the effect back to a person.
    assert settled == "contradicts"
    effect = Effect.objects.get(effect_id=open_effect)
    assert (effect.state, effect.contradicted) == ("RESOLVED_NOT_HAPPENED", True)
    services.effect_resolve(
        tenant=mail, effect_id=open_effect, happened=True, reason="the ERP says sent", by="fiona"
    )
    effect.refresh_from_db()
    assert (effect.state, effect.contradicted) == ("RESOLVED_HAPPENED", False)


def test_ambiguous_says_the_rule_that_reached_it_not_todays_target_record(mail: Tenant) -> None:
    """The target has a 24 h evidence window, but an agent that declared none recorded its
    AMBIGUOUS at once: the sentence must not claim the notary waited 24 h for evidence."""
    unasked = dispatched(mail, "mail", "case-1")
    services.effect_record_outcome(
        tenant=mail,
        effect_id=unasked,
        kind="AMBIGUOUS",
        body={"recheck": {"reason": "tier 3: nothing to ask, never resend"}},
    )
    assert sentence(unasked) == (
        "Cannot know: the request may have reached mail; mail cannot be asked whether it acted, "
        "so it was not sent again. A person must decide."
    )
    assert "24 h" not in sentence(unasked)

    silent = dispatched(mail, "mail", "case-2")
    verdict = services.effect_record_outcome(
        tenant=mail,
        effect_id=silent,
        kind="AMBIGUOUS",
        body={"recheck": {"evidence": "none within the evidence window; silence proves nothing"}},
    )[0]
    sent = [e for e in verdict_history(mail, silent) if e.kind == EntryKind.DISPATCHED][-1]
    waited = (verdict.created_at - sent.created_at).total_seconds()
    assert waited < 60
    assert sentence(silent) == (
        f"Cannot know: the request may have reached mail; no evidence of it arrived in the "
        f"{waited:.3g} s between sending it and this verdict, and silence does not prove it was "
        "not done. A person must decide."
    )

    asked = dispatched(mail, "mail", "case-3")
    services.effect_record_outcome(
        tenant=mail,
        effect_id=asked,
        kind="AMBIGUOUS",
        body={
            "recheck": {
                "reason": "lease_revoked",
                "lookup": "unknown",
                "detail": "the lookup timed out",
            }
        },
    )
    assert sentence(asked).startswith(
        "Cannot know: the request may have reached mail; mail was asked and could not say"
    )
    assert "When it was checked again, the approval was withdrawn before it could be sent." in (
        sentence(asked)
    )

    bare = dispatched(mail, "mail", "case-4")
    services.effect_record_outcome(tenant=mail, effect_id=bare, kind="AMBIGUOUS", body={})
    assert "nothing recorded says whether it acted" in sentence(bare)


def test_a_contradicted_decision_says_what_contradicts_what(mail: Tenant) -> None:
    effect_id = dispatched(mail, "mail", "case-1")
    services.effect_record_outcome(tenant=mail, effect_id=effect_id, kind="AMBIGUOUS", body={})
    services.effect_resolve(
        tenant=mail, effect_id=effect_id, happened=False, reason="not in the outbox", by="fiona"
    )
    observed, _ = services.attestation_record(
        tenant=mail, by="erp", effect_id=effect_id, stage="performed", reference="m1", detail=""
    )
    assert sentence(effect_id) == (
        "Contradicted: fiona decided it did not happen (“not in the outbox”), but a statement "
        f"from erp (ledger entry {observed.seq}) says it was performed. A person must decide "
        "again."
    )


def test_a_duplicate_at_the_target_contradicts_a_commit(mail: Tenant) -> None:
    effect_id = dispatched(mail, "mail", "case-1")
    services.effect_record_outcome(
        tenant=mail,
        effect_id=effect_id,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "msg_1", "recheck": None},
    )
    observed, _ = services.attestation_record(
        tenant=mail, by="erp", effect_id=effect_id, stage="performed", reference="msg_2", detail=""
    )
    assert sentence(effect_id) == (
        "Contradicted: the record says it was done once (COMMITTED), but a statement from erp "
        f"(ledger entry {observed.seq}) reports another result: mail acted more than once. A "
        "person must decide again."
    )


def verdict_history(tenant: Tenant, effect_id: str) -> list[LedgerEntry]:
    return effect_entries(log=tenant.log, effect_id=effect_id)
