"""The reviewers are told, by email through a real SMTP server and by a signed webhook to a real
receiver, when an effect enters the review queue, passes its SLA or has a decision contradicted:
once per event, whatever reruns, retries or concurrent workers do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import LazySettings
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from notary import selectors, services
from notary.groups import FINANCE_REVIEWERS
from notary.models import Effect, ReviewEvent, ReviewNotice, ReviewNotifications, Tenant
from notary.tasks import (
    NOTICE_RETRIES,
    NOTICE_STRANDED_AFTER,
    notify_overdue_reviews,
    send_review_notice,
    send_stranded_review_notices,
)
from testkit.factories import CENTS_MONEY, register, settled
from testkit.inbox import Mailbox, WebhookReceiver, smtp_server, wait_for, webhook_receiver

PUBLIC_URL = "https://notary.example"
DESK = "desk@acme.example"
BIG_REFUND = {"amount_cents": 1_250_000, "currency": "usd"}
Capture = Callable[..., Any]


@pytest.fixture
def mailbox(settings: LazySettings) -> Iterator[Mailbox]:
    """A real SMTP server, and Django's SMTP backend pointed at it."""
    with smtp_server() as box:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = box.host, box.port
        settings.NOTARY_PUBLIC_URL = PUBLIC_URL
        yield box


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


@pytest.fixture
def desk(acme: Tenant, hook: WebhookReceiver) -> Tenant:
    """Acme tells its review desk's address and its chat webhook."""
    _, hook.secret = services.review_notifications_set(
        tenant=acme, emails=[DESK], webhook_url=hook.url
    )
    register(acme, "payments", money=CENTS_MONEY)
    return acme


def queued(tenant: Tenant, capture: Capture, case_id: str = "case-1") -> Effect:
    """An AMBIGUOUS refund of $12,500.00 on the payments target, its commit's callbacks run."""
    with capture(execute=True):
        effect_id = settled(tenant, case_id, "payments", BIG_REFUND, "AMBIGUOUS")
    return Effect.objects.get(tenant=tenant, effect_id=effect_id)


def notice_of(effect: Effect, event: ReviewEvent) -> ReviewNotice:
    return ReviewNotice.objects.get(tenant=effect.tenant, effect_id=effect.effect_id, event=event)


def page_of(effect: Effect) -> str:
    return f"{PUBLIC_URL}/admin/notary/effect/{effect.pk}/change/"


@pytest.mark.django_db
def test_an_effect_entering_the_queue_is_emailed_and_posted_once(
    desk: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    effect = queued(desk, django_capture_on_commit_callbacks)

    [message] = mailbox.messages
    assert mailbox.recipients == [[DESK]]
    assert message["To"] == DESK
    assert message["Subject"] == "Review needed: refund of $12,500.00 on case-1 (acme)"
    text = message.get_content()
    assert "The refund of $12,500.00 on case-1, sent to payments (tenant acme)" in text
    assert selectors.effect_review(effect=effect).sentence in text
    assert page_of(effect) in text
    assert "1250000" not in text
    [payload] = hook.received
    assert hook.unverified == []
    assert payload["type"] == "review.entered_queue"
    assert payload["tenant"] == "acme" and payload["effect_id"] == effect.effect_id
    assert (payload["case_id"], payload["target"], payload["action"]) == (
        "case-1",
        "payments",
        "refund",
    )
    assert (payload["amount_minor"], payload["currency"], payload["amount"]) == (
        1_250_000,
        "USD",
        "$12,500.00",
    )
    assert payload["url"] == page_of(effect)
    assert payload["waiting_since"] == effect.queued_at.isoformat()  # type: ignore[union-attr]
    assert payload["review_due"] is not None and payload["contradictions"] == []
    notice = notice_of(effect, ReviewEvent.ENTERED_QUEUE)
    assert hook.message_ids == [f"notice_{notice.pk}"]
    assert notice.email_to == DESK and notice.webhook_url == hook.url
    assert notice.email_sent_at and notice.webhook_sent_at
    assert (notice.email_error, notice.webhook_error) == ("", "")

    with django_capture_on_commit_callbacks(execute=True):
        send_review_notice.delay(notice.pk)
        send_review_notice.delay(notice.pk)
        assert notify_overdue_reviews.delay().get() == 0
        send_stranded_review_notices.delay()
    assert len(mailbox.messages) == 1 and len(hook.received) == 1 and hook.requests == 1
    assert ReviewNotice.objects.count() == 1


@pytest.mark.django_db
def test_an_overdue_review_is_told_once_per_wait(
    acme: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    _, hook.secret = services.review_notifications_set(
        tenant=acme, emails=[DESK], webhook_url=hook.url
    )
    register(acme, "payments", review_sla=timedelta(milliseconds=1), money=CENTS_MONEY)
    effect = queued(acme, django_capture_on_commit_callbacks)
    wait_for(lambda: bool(selectors.overdue_reviews(now=timezone.now())))

    with django_capture_on_commit_callbacks(execute=True):
        assert notify_overdue_reviews.delay().get() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert notify_overdue_reviews.delay().get() == 0

    subjects = [message["Subject"] for message in mailbox.messages]
    assert subjects == [
        "Review needed: refund of $12,500.00 on case-1 (acme)",
        "Overdue: refund of $12,500.00 on case-1 (acme)",
    ]
    overdue = mailbox.messages[1].get_content()
    assert "has waited for a person's review past its target's review SLA" in overdue
    assert "its review is due by" in overdue
    assert [p["type"] for p in hook.received] == ["review.entered_queue", "review.sla_passed"]
    notice = notice_of(effect, ReviewEvent.SLA_PASSED)
    assert notice.cause == effect.queued_at.isoformat()  # type: ignore[union-attr]
    assert notice.email_sent_at and notice.webhook_sent_at


@pytest.mark.django_db
def test_a_contradicted_decision_is_told_as_that_naming_who_decided(
    desk: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    effect = queued(desk, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        services.effect_resolve(
            tenant=desk,
            effect_id=effect.effect_id,
            happened=False,
            reason="no refund in the bank statement",
            by="fiona",
        )
    with django_capture_on_commit_callbacks(execute=True):
        services.attestation_record(
            tenant=desk,
            by="payments-service",
            effect_id=effect.effect_id,
            stage="performed",
            reference="re_late",
            detail="refunded after all",
        )

    events = ReviewNotice.objects.order_by("pk").values_list("event", flat=True)
    assert list(events) == [ReviewEvent.ENTERED_QUEUE, ReviewEvent.DECISION_CONTRADICTED]
    contradicted = mailbox.messages[-1]
    assert len(mailbox.messages) == 2
    assert contradicted["Subject"] == (
        "Decision contradicted: refund of $12,500.00 on case-1 (acme)"
    )
    text = contradicted.get_content()
    assert "fiona decided it did not happen" in text
    assert "no refund in the bank statement" in text
    assert "What contradicts it: evidence says it was performed" in text
    payload = hook.received[-1]
    assert payload["type"] == "review.decision_contradicted"
    assert payload["decision"]["by"] == "fiona" and payload["decision"]["happened"] is False
    assert [c["kind"] for c in payload["contradictions"]] == ["happened_after_not_happened"]


@pytest.mark.django_db
def test_a_notice_whose_sending_was_lost_is_sent_by_the_sweep(
    desk: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    with django_capture_on_commit_callbacks(execute=False):  # lost, as with the broker down
        settled(desk, "case-1", "payments", BIG_REFUND, "AMBIGUOUS")
    assert send_stranded_review_notices.delay().get() == 0  # just written: its task may be queued
    lost_since = timezone.now() - NOTICE_STRANDED_AFTER - timedelta(seconds=1)
    ReviewNotice.objects.update(created_at=lost_since)

    assert send_stranded_review_notices.delay().get() == 1
    assert send_stranded_review_notices.delay().get() == 0
    assert len(mailbox.messages) == 1 and len(hook.received) == 1


@pytest.mark.django_db
def test_a_refused_webhook_is_retried_and_delivered_once_it_is_taken(
    desk: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    hook.status = 500
    effect = queued(desk, django_capture_on_commit_callbacks)
    notice = notice_of(effect, ReviewEvent.ENTERED_QUEUE)

    assert hook.requests == 1 + NOTICE_RETRIES  # Celery's retries, run eagerly here
    assert hook.received == [] and len(mailbox.messages) == 1  # the email went once
    notice.refresh_from_db()
    assert notice.webhook_sent_at is None
    assert "the receiver answered 500" in notice.webhook_error

    hook.status = 200
    send_review_notice.delay(notice.pk)
    send_review_notice.delay(notice.pk)
    assert len(hook.received) == 1 and hook.message_ids == [f"notice_{notice.pk}"]
    assert len(mailbox.messages) == 1
    notice.refresh_from_db()
    assert notice.webhook_sent_at is not None and notice.webhook_error == ""


@pytest.mark.django_db
def test_a_refused_email_is_not_marked_sent_and_goes_once_the_server_takes_it(
    desk: Tenant,
    mailbox: Mailbox,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    mailbox.refuse = True
    effect = queued(desk, django_capture_on_commit_callbacks)
    notice = notice_of(effect, ReviewEvent.ENTERED_QUEUE)
    assert mailbox.messages == []
    assert notice.email_sent_at is None
    assert "the mail server refused it" in notice.email_error and "550" in notice.email_error

    mailbox.refuse = False
    send_review_notice.delay(notice.pk)
    send_review_notice.delay(notice.pk)
    assert len(mailbox.messages) == 1
    notice.refresh_from_db()
    assert notice.email_sent_at is not None and notice.email_error == ""


@pytest.mark.django_db
def test_a_webhook_that_times_out_after_it_was_sent_is_never_sent_again(
    desk: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    settings: LazySettings,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    settings.NOTARY_NOTIFY_TIMEOUT_SECONDS = 0.5
    hook.answer.clear()  # it takes the request and does not answer
    effect = queued(desk, django_capture_on_commit_callbacks)
    hook.answer.set()
    notice = notice_of(effect, ReviewEvent.ENTERED_QUEUE)
    assert notice.webhook_sent_at is not None
    assert "may have been delivered" in notice.webhook_error

    send_review_notice.delay(notice.pk)
    assert hook.requests == 1 and len(hook.received) == 1


@pytest.mark.django_db
def test_an_unconfigured_tenant_emails_its_finance_reviewers_and_posts_nothing(
    acme: Tenant,
    mailbox: Mailbox,
    hook: WebhookReceiver,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    reviewers = Group.objects.get(name=FINANCE_REVIEWERS)
    for username, email, active in (
        ("fiona", "fiona@acme.example", True),
        ("gary", "", True),
        ("ivy", "ivy@acme.example", False),
    ):
        user = User.objects.create_user(username, email=email, is_staff=True, is_active=active)
        user.groups.add(reviewers)
    User.objects.create_user("otto", email="otto@acme.example", is_staff=True)  # no group
    register(acme, "payments", money=CENTS_MONEY)

    effect = queued(acme, django_capture_on_commit_callbacks)

    assert mailbox.recipients == [["fiona@acme.example"]]
    assert hook.requests == 0
    notice = notice_of(effect, ReviewEvent.ENTERED_QUEUE)
    assert notice.webhook_sent_at is None
    assert notice.webhook_error == "not sent: no webhook is configured"


@pytest.mark.django_db
def test_rebuilding_the_effects_table_writes_no_notice(
    desk: Tenant, django_capture_on_commit_callbacks: Capture
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        settled(desk, "case-1", "payments", BIG_REFUND, "AMBIGUOUS")
    with django_capture_on_commit_callbacks() as queued_sends:
        services.effects_rebuild(tenant=desk)
    assert ReviewNotice.objects.count() == 1 and queued_sends == []


@pytest.mark.django_db
def test_notify_reviewers_sets_who_is_told_and_shows_the_secret_once(
    acme: Tenant, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command(
        "notify_reviewers",
        "--tenant",
        "acme",
        "--email",
        "a@acme.example",
        "b@acme.example",
        "--webhook-url",
        "https://chat.example/hooks/review",
    )
    shown = capsys.readouterr().out
    config = ReviewNotifications.objects.get(tenant=acme)
    assert config.emails == ["a@acme.example", "b@acme.example"]
    assert config.webhook_secret.startswith("whsec_")
    assert f"shown this once: {config.webhook_secret}" in shown

    call_command("notify_reviewers", "--tenant", "acme", "--no-email")
    again = capsys.readouterr().out
    assert "whsec_" not in again and "the members of 'Finance reviewers'" in again
    kept = ReviewNotifications.objects.get(tenant=acme)
    assert kept.emails == [] and kept.webhook_secret == config.webhook_secret

    call_command("notify_reviewers", "--tenant", "acme", "--no-webhook")
    assert ReviewNotifications.objects.get(tenant=acme).webhook_secret == ""
    with pytest.raises(CommandError, match="not an email address"):
        call_command("notify_reviewers", "--tenant", "acme", "--email", "not-an-address")
    with pytest.raises(CommandError, match="an http"):
        call_command("notify_reviewers", "--tenant", "acme", "--webhook-url", "ftp://x.example")


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent workers are tested on PostgreSQL (the ledger's SQLite triggers refuse "
    "the flush a transactional test ends in)",
)
@pytest.mark.django_db(transaction=True)
def test_two_workers_sending_one_notice_at_once_send_one_email(mailbox: Mailbox) -> None:
    tenant = services.tenant_create(slug="acme", name="Acme Refunds")
    register(tenant, "payments", money=CENTS_MONEY)
    # Committed with nobody to tell: its first run sent nothing, and left the email unclaimed.
    effect_id = settled(tenant, "case-1", "payments", BIG_REFUND, "AMBIGUOUS")
    notice = ReviewNotice.objects.get(effect_id=effect_id)
    assert notice.email_sent_at is None and mailbox.messages == []
    services.review_notifications_set(tenant=tenant, emails=[DESK])

    start = threading.Barrier(2)
    outcomes: list[str] = []

    def worker() -> None:
        try:
            start.wait(timeout=30)
            outcomes.append(send_review_notice.apply(args=(notice.pk,)).get()["email"])
        finally:
            connection.close()

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["sent", "taken"]
    assert len(mailbox.messages) == 1
