"""The finance review in the admin: the AMBIGUOUS queue, an effect's page that reads plainly,
a decision with a reason written as RESOLVED by a service, a lease revoked only once confirmed
with a reason, and what each group may do."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, User
from django.contrib.messages import get_messages
from django.test import Client

from ledger.core.entries import EntryKind
from ledger.models import Entry
from ledger.selectors import iter_entries
from notary import services
from notary.errors import NotaryConflict
from notary.groups import AUDITORS, FINANCE_REVIEWERS
from notary.models import ApiKey, Effect, Lease, Tenant
from notary.selectors import api_key_for_token
from testkit.factories import dispatched, leased, proposed, register

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


LEASES = "/admin/notary/lease/"


def revoked_entries(tenant: Tenant) -> list[dict[str, object]]:
    entries = iter_entries(log=tenant.log)
    return [e.body_value() for e in entries if e.kind == EntryKind.LEASE_REVOKED]


def choose_revoke(client: Client, *leases: Lease) -> Any:
    """The changelist's action form: the leases ticked, "Revoke the selected leases", Go."""
    selected = [lease.pk for lease in leases]
    return client.post(LEASES, {"action": "revoke", "index": 0, "_selected_action": selected})


def confirm_revoke(client: Client, *leases: Lease, reason: str) -> Any:
    """The confirmation page's form, submitted with "Yes, revoke"."""
    selected = [lease.pk for lease in leases]
    return client.post(
        LEASES,
        {"action": "revoke", "_selected_action": selected, "post": "yes", "reason": reason},
    )


def said(client: Client, answer: Any) -> list[str]:
    """The messages on the page an action redirects to (shown there, so shown once)."""
    assert answer.status_code == 302
    return [m.message for m in client.get(answer["Location"]).context["messages"]]


def test_a_revocation_is_shown_first_and_written_only_with_a_reason(ambiguous: Effect) -> None:
    lease = Lease.objects.get(lease_id=ambiguous.lease_id)
    fiona = staff("fiona", FINANCE_REVIEWERS)
    assert 'value="revoke"' in fiona.get(LEASES).content.decode()

    shown = choose_revoke(fiona, lease)
    html = shown.content.decode()
    assert shown.status_code == 200
    assert shown.templates[0].name == "admin/notary/lease/revoke_confirmation.html"
    assert "<h1>Revoke the selected leases</h1>" in html
    assert f"<code>{lease.lease_id}</code></td><td>email</td><td>case-4711</td>" in html
    assert "<td>alice</td>" in html and lease.expires_at.strftime("%Y-%m-%d %H:%M:%S UTC") in html
    assert "not yet: it will be revoked" in html
    assert f'<input type="hidden" name="_selected_action" value="{lease.pk}">' in html
    assert '<input type="hidden" name="action" value="revoke">' in html
    assert "A ledger entry is irreversible" in html
    assert "Agents can no longer dispatch under these leases" in html
    assert '<textarea name="reason"' in html and 'value="Yes, revoke"' in html
    assert revoked_entries(ambiguous.tenant) == []  # nothing written before confirmation

    for blank in ("", " \r\n "):
        again = confirm_revoke(fiona, lease, reason=blank)
        assert again.status_code == 200
        assert "This field is required." in again.content.decode()
        assert f"<code>{lease.lease_id}</code>" in again.content.decode()
    control = confirm_revoke(fiona, lease, reason="stop\x01")  # the form passes it, the service not
    assert control.status_code == 200
    assert "a revocation&#x27;s reason holds a control character" in control.content.decode()
    assert revoked_entries(ambiguous.tenant) == []
    assert Lease.objects.get(pk=lease.pk).revoked_at is None

    reason = "The customer withdrew the request (ticket 4711)."
    confirmed = confirm_revoke(fiona, lease, reason=reason)
    assert confirmed.status_code == 302 and confirmed["Location"] == LEASES
    assert revoked_entries(ambiguous.tenant) == [
        {"lease_id": lease.lease_id, "by": "fiona", "reason": reason}
    ]
    revoked = Lease.objects.get(pk=lease.pk)
    assert (revoked.revoked_by, revoked.revoked_reason) == ("fiona", reason)
    assert said(fiona, confirmed) == [f"Revoked 1 lease (ledger entry {revoked.revoked_seq})."]


def test_a_lease_revoked_before_gets_no_second_entry_and_the_message_counts_it(
    ambiguous: Effect,
) -> None:
    tenant = ambiguous.tenant
    earlier = Lease.objects.get(lease_id=ambiguous.lease_id)
    services.lease_revoke(tenant=tenant, lease_id=earlier.lease_id, by="gil", reason="disputed")
    live = leased(tenant, "case-5", "refund")
    fiona = staff("fiona", FINANCE_REVIEWERS)

    html = choose_revoke(fiona, earlier, live).content.decode()
    revoked_at = Lease.objects.get(pk=earlier.pk).revoked_at
    assert revoked_at is not None
    assert (
        f"already revoked by gil at {revoked_at:%Y-%m-%d %H:%M:%S} UTC, nothing will be written"
        in html
    )
    assert html.count("not yet: it will be revoked") == 1

    confirmed = confirm_revoke(fiona, earlier, live, reason="the case is closed")
    seq = Lease.objects.get(pk=live.pk).revoked_seq
    assert said(fiona, confirmed) == [
        f"Revoked 1 lease (ledger entry {seq}); 1 was already revoked, nothing written for it."
    ]
    assert [body["by"] for body in revoked_entries(tenant)] == ["gil", "fiona"]

    more = [leased(tenant, f"case-{n}", "refund") for n in (6, 7)]
    confirmed = confirm_revoke(fiona, earlier, live, *more, reason="the case is closed")
    # Revoked in the list's order, newest lease first.
    seqs = ", ".join(str(Lease.objects.get(pk=lease.pk).revoked_seq) for lease in more[::-1])
    assert said(fiona, confirmed) == [
        f"Revoked 2 leases (ledger entries {seqs}); 2 were already revoked, nothing written "
        "for them."
    ]
    nothing = confirm_revoke(fiona, earlier, reason="again")
    assert said(fiona, nothing) == [
        "No lease revoked; 1 was already revoked, nothing written for it."
    ]
    assert len(revoked_entries(tenant)) == 4


def test_the_admins_history_records_each_lease_revoked(ambiguous: Effect) -> None:
    lease = Lease.objects.get(lease_id=ambiguous.lease_id)
    fiona = staff("fiona", FINANCE_REVIEWERS)
    assert "None available" in fiona.get("/admin/").content.decode()
    confirm_revoke(fiona, lease, reason="disputed by the customer")
    confirm_revoke(fiona, lease, reason="twice")  # revoked already: no second record
    seq = Lease.objects.get(pk=lease.pk).revoked_seq
    [logged] = LogEntry.objects.all()
    assert (logged.user.username, logged.action_flag, logged.object_id) == (
        "fiona",
        CHANGE,
        str(lease.pk),
    )
    assert logged.get_change_message() == f"Revoked (ledger entry {seq}): disputed by the customer"
    index = fiona.get("/admin/").content.decode()
    assert "None available" not in index and str(lease) in index


def test_the_lease_list_shows_and_filters_revocations(ambiguous: Effect) -> None:
    tenant = ambiguous.tenant
    revoked = Lease.objects.get(lease_id=ambiguous.lease_id)
    services.lease_revoke(tenant=tenant, lease_id=revoked.lease_id, by="gil", reason="disputed")
    revoked.refresh_from_db()
    live = leased(tenant, "case-5", "refund")
    fiona = staff("fiona", FINANCE_REVIEWERS)

    listing = fiona.get(LEASES).content.decode()
    assert ">Revoked</a></div>" in listing  # the column's header, sortable
    assert revoked.revoked_at is not None
    assert f"by gil at {revoked.revoked_at:%Y-%m-%d %H:%M:%S} UTC" in listing
    assert '<td class="field-revoked">-</td>' in listing
    assert "By revoked" in listing
    for value, shown, hidden in (("yes", revoked, live), ("no", live, revoked)):
        filtered = fiona.get(LEASES, {"revoked": value}).content.decode()
        assert shown.lease_id in filtered and hidden.lease_id not in filtered, value
    detail = fiona.get(f"{LEASES}{revoked.pk}/change/").content.decode()
    assert "Revoked reason" in detail and "disputed" in detail


def test_an_auditor_can_neither_choose_nor_confirm_a_revocation(ambiguous: Effect) -> None:
    lease = Lease.objects.get(lease_id=ambiguous.lease_id)
    audrey = staff("audrey", AUDITORS)
    listing = audrey.get(LEASES)
    assert listing.status_code == 200 and 'value="revoke"' not in listing.content.decode()
    chosen = choose_revoke(audrey, lease)
    assert "Yes, revoke" not in chosen.content.decode()
    confirmed = confirm_revoke(audrey, lease, reason="I think it should end")
    assert "Yes, revoke" not in confirmed.content.decode()
    assert revoked_entries(ambiguous.tenant) == []
    assert Lease.objects.get(pk=lease.pk).revoked_at is None
    assert not LogEntry.objects.exists()


def test_revoking_api_keys_counts_and_records_only_the_live_ones(
    acme: Tenant, admin_client: Client
) -> None:
    gone, live = (services.api_key_issue(tenant=acme, role="agent", holder=h)[0] for h in "ab")
    services.api_key_revoke(api_key=gone)
    answer = admin_client.post(
        "/admin/notary/apikey/",
        {"action": "revoke", "index": 0, "_selected_action": [gone.pk, live.pk]},
    )
    assert said(admin_client, answer) == ["Revoked 1 key; 1 was already revoked."]
    assert ApiKey.objects.get(pk=live.pk).revoked_at is not None
    [logged] = LogEntry.objects.all()
    assert (logged.object_id, logged.get_change_message()) == (str(live.pk), "Revoked")
    again = admin_client.post(
        "/admin/notary/apikey/",
        {"action": "revoke", "index": 0, "_selected_action": [gone.pk, live.pk]},
    )
    assert said(admin_client, again) == ["No key revoked; 2 were already revoked."]
    assert LogEntry.objects.count() == 1


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


def test_an_effect_held_by_evidence_before_its_dispatch_is_queued_with_the_evidence_shown(
    acme: Tenant,
) -> None:
    """A write-ahead service says it performed an effect that was never dispatched: refused, and
    kept. The queue lists the effect, its page shows the contradiction and the statement marked
    refused, and the reviewer's decision settles it for good."""
    services.target_register(
        tenant=acme,
        name="erp",
        tier=3,
        queryable=False,
        max_inflight=timedelta(seconds=30),
        attests_before_acting=True,
    )
    effect_id = proposed(acme, "erp", "case-77")
    with pytest.raises(NotaryConflict, match="no intent"):
        services.attestation_record(
            tenant=acme,
            by="erp-service",
            effect_id=effect_id,
            stage="performed",
            reference="doc_9",
            detail="",
        )
    effect = Effect.objects.get(effect_id=effect_id)
    reviewer = staff("fiona", FINANCE_REVIEWERS)
    listed = reviewer.get("/admin/notary/ambiguouseffect/").content.decode()
    assert f"/admin/notary/ambiguouseffect/{effect.pk}/change/" in listed
    page = reviewer.get(f"/admin/notary/ambiguouseffect/{effect.pk}/change/").content.decode()
    assert 'id="contradicted"' in page
    assert "evidence says it was performed before it was dispatched" in page
    assert "attestation: performed <strong>(refused: no intent to act on it" in page
    assert "doc_9" in page and "Record the decision" in page
    decided = reviewer.post(
        f"/admin/notary/ambiguouseffect/{effect.pk}/change/",
        {"happened": "no", "reason": "The ERP has no doc_9.", "confirmed": "True"},
    )
    assert decided.status_code == 302
    effect.refresh_from_db()
    assert (effect.state, effect.contradicted, effect.attempts) == (
        "RESOLVED_NOT_HAPPENED",
        False,
        0,
    )
