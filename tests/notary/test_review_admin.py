"""The finance review in the admin: the AMBIGUOUS queue, an effect's page that reads plainly,
a decision with a reason written as RESOLVED by a service, and what each group may do."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.messages import get_messages
from django.test import Client

from ledger.core.entries import EntryKind
from ledger.models import Entry
from ledger.selectors import iter_entries
from notary import services
from notary.groups import AUDITORS, FINANCE_REVIEWERS
from notary.models import ApiKey, Effect, Lease, Tenant
from notary.selectors import api_key_for_token
from testkit.factories import dispatched, register

pytestmark = pytest.mark.django_db


def staff(username: str, group: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ambiguous(acme: Tenant) -> Effect:
    register(acme, "mail", evidence_window=timedelta(hours=24), max_inflight=timedelta(seconds=1))
    effect_id = dispatched(acme, "mail", "case-4711")
    services.effect_record_outcome(
        tenant=acme,
        effect_id=effect_id,
        kind="AMBIGUOUS",
        body={"recheck": {"reason": "tier 3: nothing to ask, never resend"}},
    )
    return Effect.objects.get(effect_id=effect_id)


def test_a_reviewer_sees_the_queue_reads_the_effect_and_resolves_it(ambiguous: Effect) -> None:
    reviewer = staff("fiona", FINANCE_REVIEWERS)
    queue = reviewer.get("/admin/notary/ambiguouseffect/")
    assert queue.status_code == 200
    listing = queue.content.decode()
    assert ambiguous.effect_id in listing
    assert "<h1>Review queue: AMBIGUOUS or contradicted effects</h1>" in listing
    assert "1 effect to review" in listing and "to view" not in listing

    page = reviewer.get(f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert (
        "Cannot know: the request may have reached mail; mail cannot be asked whether it acted, "
        "so it was not sent again. A person must decide." in html
    )
    assert "Record the decision" in html
    assert 'id="ledger"' in html and "DISPATCHED" in html

    size = ambiguous.tenant.log.size
    no_reason = reviewer.post(
        f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/", {"happened": "no", "reason": ""}
    )
    assert no_reason.status_code == 200  # the form again, with its error
    ambiguous.tenant.log.refresh_from_db()
    assert ambiguous.tenant.log.size == size

    decided = reviewer.post(
        f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/",
        {
            "happened": "no",
            "reason": "The mail service's log shows no message for this case.",
            "confirmed": "True",
        },
    )
    assert decided.status_code == 302
    assert decided["Location"] == "/admin/notary/ambiguouseffect/"
    resolved = [e for e in iter_entries(log=ambiguous.tenant.log) if e.kind == EntryKind.RESOLVED]
    assert [e.body_value() for e in resolved] == [
        {
            "by": "fiona",
            "happened": False,
            "reason": "The mail service's log shows no message for this case.",
        }
    ]
    assert Effect.objects.get(pk=ambiguous.pk).state == "RESOLVED_NOT_HAPPENED"
    listed = reviewer.get("/admin/notary/ambiguouseffect/").content.decode()
    assert f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/" not in listed
    after = reviewer.get(f"/admin/notary/effect/{ambiguous.pk}/change/").content.decode()
    assert "Decided by fiona: it did not happen." in after
    assert "Record the decision" not in after


def test_an_auditor_reads_but_cannot_resolve(ambiguous: Effect) -> None:
    auditor = staff("audrey", AUDITORS)
    page = auditor.get(f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/")
    assert page.status_code == 200
    assert "Record the decision" not in page.content.decode()
    refused = auditor.post(
        f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/",
        {"happened": "yes", "reason": "I think so"},
    )
    assert refused.status_code == 403
    assert Effect.objects.get(pk=ambiguous.pk).state == "AMBIGUOUS"


def test_nobody_changes_ledger_rows_through_the_admin(ambiguous: Effect) -> None:
    reviewer = staff("fiona", FINANCE_REVIEWERS)
    entry = Entry.objects.filter(effect_id=ambiguous.effect_id).first()
    assert entry is not None
    shown = reviewer.get(f"/admin/ledger/entry/{entry.pk}/change/")
    assert shown.status_code == 200
    assert 'name="_save"' not in shown.content.decode()
    assert reviewer.post(f"/admin/ledger/entry/{entry.pk}/change/", {}).status_code == 403
    assert (
        reviewer.post(f"/admin/ledger/entry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert reviewer.get("/admin/ledger/entry/add/").status_code == 403
    assert reviewer.get("/admin/webhooks/rawevent/add/").status_code == 403


def test_a_reviewer_revokes_a_lease_and_an_auditor_cannot(ambiguous: Effect) -> None:
    lease = Lease.objects.get(lease_id=ambiguous.lease_id)
    action = {"action": "revoke", "_selected_action": [lease.pk]}
    auditor = staff("audrey", AUDITORS)
    auditor.post("/admin/notary/lease/", action)
    assert Lease.objects.get(pk=lease.pk).revoked_at is None
    reviewer = staff("fiona", FINANCE_REVIEWERS)
    reviewer.post("/admin/notary/lease/", action)
    revoked = Lease.objects.get(pk=lease.pk)
    assert revoked.revoked_by == "fiona"
    entry = [e for e in iter_entries(log=ambiguous.tenant.log) if e.seq == revoked.revoked_seq]
    assert entry[0].kind == EntryKind.LEASE_REVOKED


def test_a_new_api_key_is_shown_once(acme: Tenant, admin_client: Client) -> None:
    answer = admin_client.post(
        "/admin/notary/apikey/add/",
        {"tenant": acme.pk, "role": "agent", "holder": "refund-bot", "label": "prod"},
    )
    assert answer.status_code == 302
    [shown] = [
        m.message for m in get_messages(answer.wsgi_request) if "shown this once" in m.message
    ]
    token = shown.rsplit(" ", 1)[1]
    api_key = api_key_for_token(token=token)
    assert api_key is not None and api_key.holder == "refund-bot"
    assert token not in str(ApiKey.objects.values_list().get(pk=api_key.pk))  # stored hashed
    change_page = f"/admin/notary/apikey/{api_key.pk}/change/"
    assert token in admin_client.get(change_page).content.decode()  # the one showing
    assert token not in admin_client.get(change_page).content.decode()  # and never again


def test_a_decision_contradicted_by_evidence_returns_to_the_queue_with_a_banner(
    ambiguous: Effect,
) -> None:
    services.effect_resolve(
        tenant=ambiguous.tenant,
        effect_id=ambiguous.effect_id,
        happened=False,
        reason="not in the outbox",
        by="fiona",
    )
    services.attestation_record(
        tenant=ambiguous.tenant,
        by="mailer",
        effect_id=ambiguous.effect_id,
        stage="performed",
        reference="msg_1",
        detail="",
    )
    reviewer = staff("fiona", FINANCE_REVIEWERS)
    listed = reviewer.get("/admin/notary/ambiguouseffect/").content.decode()
    assert f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/" in listed
    page = reviewer.get(f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/").content.decode()
    assert 'id="contradicted"' in page
    assert "evidence says it was performed, but the verdict is RESOLVED_NOT_HAPPENED" in page
    assert "Record the decision" in page
    decided = reviewer.post(
        f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/",
        {"happened": "yes", "reason": "The mailer's statement shows it went.", "confirmed": "True"},
    )
    assert decided.status_code == 302
    effect = Effect.objects.get(pk=ambiguous.pk)
    assert (effect.state, effect.contradicted) == ("RESOLVED_HAPPENED", False)


def _resolved(effect: Effect) -> list[dict[str, object]]:
    entries = iter_entries(log=effect.tenant.log)
    return [e.body_value() for e in entries if e.kind == EntryKind.RESOLVED]


@pytest.mark.parametrize("raced", [False, True])
def test_a_second_reviewer_is_told_who_decided_and_keeps_what_they_wrote(
    ambiguous: Effect, raced: bool
) -> None:
    """Two reviewers open the same effect; the first records a decision. The second's submit
    gets the page again, not a 404 or a 500: who decided, when and why, their own text kept,
    and no second RESOLVED. `raced`: the second submit passes the page's check (the effects
    row still says AMBIGUOUS, as just before the first decision committed) and is refused by
    the service."""
    page = f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/"
    fiona, gil = staff("fiona", FINANCE_REVIEWERS), staff("gil", FINANCE_REVIEWERS)
    assert "Record the decision" in gil.get(page).content.decode()
    first = fiona.post(
        page, {"happened": "yes", "reason": "The customer has the email.", "confirmed": "True"}
    )
    assert first.status_code == 302
    if raced:
        Effect.objects.filter(pk=ambiguous.pk).update(state="AMBIGUOUS")
    mine = "Mail log shows nothing sent for case-4711; I say it did not happen."
    second = gil.post(page, {"happened": "no", "reason": mine, "confirmed": "True"})
    html = second.content.decode()
    assert second.status_code == 200
    assert "Someone decided this effect meanwhile: your decision was not recorded" in html
    assert "Decided by <strong>fiona</strong>" in html
    assert "it happened — “The customer has the email.”" in html
    assert f'<textarea id="your-reason" rows="3" cols="80" readonly>{mine}</textarea>' in html
    assert "Record the decision" not in html
    assert _resolved(ambiguous) == [
        {"by": "fiona", "happened": True, "reason": "The customer has the email."}
    ]


def test_a_decision_is_shown_back_and_written_only_once_confirmed(ambiguous: Effect) -> None:
    page = f"/admin/notary/ambiguouseffect/{ambiguous.pk}/change/"
    fiona = staff("fiona", FINANCE_REVIEWERS)
    reason = "The outbox shows it <sent> at 09:14."
    shown = fiona.post(page, {"happened": "yes", "reason": reason})
    html = shown.content.decode()
    assert shown.status_code == 200
    assert "Check it before it is written" in html
    assert '<td id="confirm-decision">It happened</td>' in html
    assert '<td id="confirm-reason">The outbox shows it &lt;sent&gt; at 09:14.</td>' in html
    assert (
        "as <strong>fiona</strong>&#x27;s decision" in html or "as <strong>fiona</strong>'s" in html
    )
    assert _resolved(ambiguous) == []  # nothing written yet
    confirmed = fiona.post(page, {"happened": "yes", "reason": reason, "confirmed": "True"})
    assert confirmed.status_code == 302
    assert _resolved(ambiguous) == [{"by": "fiona", "happened": True, "reason": reason}]
