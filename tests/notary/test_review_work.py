"""Working the review queue as a team: taking an effect, assigning one or a selection to a
colleague, notes kept in the ledger with the effect (and exported with it), and every action
in the admin's history."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client

from gate_client.receipts import derive_receipt
from gate_client.verify import verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import EntryKind
from ledger.core.note import Signer
from ledger.selectors import effect_entries
from notary import services
from notary.errors import NotaryInputError
from notary.exports import export_receipts
from notary.groups import AUDITORS, FINANCE_REVIEWERS
from notary.models import Effect, ReviewAssignment, Tenant
from testkit.exports import carried_entry
from testkit.factories import CENTS_MONEY, register, settled

pytestmark = pytest.mark.django_db
QUEUE = "/admin/notary/ambiguouseffect/"


def person(username: str, group: str) -> tuple[User, Client]:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def waiting(acme: Tenant) -> list[Effect]:
    register(acme, "payments", money=CENTS_MONEY)
    ids = [
        settled(acme, f"case-{n}", "payments", {"amount_cents": 100 * n, "currency": "usd"}, o)
        for n, o in enumerate(["AMBIGUOUS", "AMBIGUOUS", "AMBIGUOUS", "COMMITTED"], start=1)
    ]
    return [Effect.objects.get(effect_id=effect_id) for effect_id in ids]


def assigned(effect: Effect) -> str | None:
    row = ReviewAssignment.objects.filter(effect_id=effect.effect_id).first()
    return row.assignee.username if row is not None else None


def test_a_reviewer_takes_and_assigns_from_the_queue(waiting: list[Effect]) -> None:
    fiona, as_fiona = person("fiona", FINANCE_REVIEWERS)
    gil, _ = person("gil", FINANCE_REVIEWERS)
    person("audrey", AUDITORS)
    first, second, third, _ = waiting
    took = as_fiona.post(QUEUE, {"action": "take", "_selected_action": [first.pk]}, follow=True)
    assert "Assigned 1 effect to fiona." in took.content.decode()
    assert assigned(first) == "fiona"

    asked = as_fiona.post(QUEUE, {"action": "assign", "_selected_action": [second.pk, third.pk]})
    page = asked.content.decode()
    assert asked.status_code == 200 and "Give 2 effects to one reviewer" in page
    assert "refund of $2.00 on case-2" in page
    choices = re.findall(r'<option value="(\d+)"[^>]*>([^<]+)</option>', page)
    assert {name for _, name in choices} == {"fiona", "gil"}  # reviewers only, no auditor
    assert assigned(second) is None  # nothing before the choice
    done = as_fiona.post(
        QUEUE,
        {"action": "assign", "_selected_action": [second.pk, third.pk], "assignee": gil.pk},
        follow=True,
    )
    assert "Assigned 2 effects to gil." in done.content.decode()
    assert (assigned(second), assigned(third)) == ("gil", "gil")

    queue = as_fiona.get(QUEUE).content.decode()
    assert queue.count('<td class="field-assigned">gil</td>') == 2
    mine = as_fiona.get(QUEUE + "?assigned=me").content.decode()
    assert first.effect_id in mine and second.effect_id not in mine
    history = LogEntry.objects.filter(user=fiona).values_list("change_message", flat=True)
    assert sorted(history) == ["Assigned to fiona", "Assigned to gil", "Assigned to gil"]
    recent = as_fiona.get("/admin/").content.decode().split('<ul class="actionlist">')[1]
    assert second.effect_id in recent.split("</ul>")[0]  # "Recent actions" lists them


def test_only_waiting_effects_are_assigned_and_only_to_reviewers(
    acme: Tenant, waiting: list[Effect]
) -> None:
    fiona, _ = person("fiona", FINANCE_REVIEWERS)
    audrey, as_audrey = person("audrey", AUDITORS)
    committed = waiting[3]
    ids = [waiting[0].effect_id, committed.effect_id]
    assert services.review_assign(tenant=acme, effect_ids=ids, assignee=fiona, by="fiona") == [
        waiting[0].effect_id
    ]
    assert assigned(committed) is None
    with pytest.raises(NotaryInputError, match="audrey does not review effects"):
        services.review_assign(tenant=acme, effect_ids=ids, assignee=audrey, by="fiona")
    refused = as_audrey.post(QUEUE, {"action": "take", "_selected_action": [waiting[1].pk]})
    assert assigned(waiting[1]) is None and refused.status_code in (200, 302, 403)


def test_a_note_is_a_ledger_entry_shown_with_its_author_and_exported(
    acme: Tenant, waiting: list[Effect], signer: Signer
) -> None:
    fiona, as_fiona = person("fiona", FINANCE_REVIEWERS)
    effect = waiting[0]
    page = f"{QUEUE}{effect.pk}/change/"
    before = derive_receipt(
        effect_entries(log=acme.log, effect_id=effect.effect_id), effect.effect_id
    )
    text = "Called the bank: no refund for case-1 yet.\nWill check again at 3 pm."
    written = as_fiona.post(page, {"note": text}, follow=True).content.decode()
    assert "Your note is ledger entry" in written
    assert "<strong>fiona</strong> at" in written
    assert "Called the bank: no refund for case-1 yet.<br>Will check again at 3 pm." in written
    history = effect_entries(log=acme.log, effect_id=effect.effect_id)
    [noted] = [e for e in history if e.kind == EntryKind.NOTED]
    assert noted.body_value() == {"by": "fiona", "text": text}
    # A note settles nothing: the receipt is what it was (now also naming the note's entry),
    # and the effect still waits.
    after = derive_receipt(history, effect.effect_id)
    assert after.entry_seqs == (*before.entry_seqs, noted.seq)
    assert replace(after, entry_seqs=before.entry_seqs) == before
    assert Effect.objects.get(pk=effect.pk).state == "AMBIGUOUS"
    assert LogEntry.objects.filter(user=fiona, change_message__startswith="Noted").count() == 1

    blank = as_fiona.post(page, {"note": "   "})
    assert blank.status_code == 200 and "This field is required." in blank.content.decode()
    assert len([e for e in effect_entries(log=acme.log, effect_id=effect.effect_id)]) == len(
        history
    )

    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    report = verify_export(lines, [log_verifier(acme.log.origin, signer)])
    assert report.receipts == 4 and report.outcomes["AMBIGUOUS"] == 3
    [line] = [json.loads(x) for x in lines if effect.effect_id.encode() in x and b'"receipt"' in x]
    carried = [
        carried_entry(e, line_effect=effect.effect_id)
        for e in line["entries"]
        if not isinstance(e, int)
    ]
    assert [e.body_value() for e in carried if e.kind == EntryKind.NOTED] == [
        {"by": "fiona", "text": text}
    ]


def test_a_reviewer_gives_an_effect_back_and_an_auditor_cannot_write(
    waiting: list[Effect],
) -> None:
    fiona, as_fiona = person("fiona", FINANCE_REVIEWERS)
    _, as_audrey = person("audrey", AUDITORS)
    effect = waiting[0]
    page = f"{QUEUE}{effect.pk}/change/"
    as_fiona.post(page, {"assign_to": str(fiona.pk)})
    assert assigned(effect) == "fiona"
    assert '<strong id="assignee">fiona</strong>' in as_audrey.get(page).content.decode()
    as_fiona.post(page, {"assign_to": ""})
    assert assigned(effect) is None
    assert as_audrey.post(page, {"note": "I was here"}).status_code == 403
    assert as_audrey.post(page, {"assign_to": str(fiona.pk)}).status_code == 403
    assert assigned(effect) is None
    assert "Add the note" not in as_audrey.get(page).content.decode()
