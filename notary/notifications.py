"""Telling a tenant's reviewers what a review notice says: an email (Django's mail framework,
any backend) and a webhook for a chat tool, signed as Standard Webhooks sign (`webhook-id`,
`webhook-timestamp`, `webhook-signature`). Each channel is claimed before it is sent, so two
runs never both send it: a failure proving nothing was delivered gives the claim back (to be
tried again), one that may have delivered keeps it (never sent twice)."""

from __future__ import annotations

import contextlib
import enum
import json
import smtplib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from django.conf import settings
from django.core import mail
from django.urls import reverse
from standardwebhooks.webhooks import Webhook

from notary import selectors, services
from notary.models import Effect, ReviewEvent, ReviewNotice
from notary.services import NoticeChannel
from notary.templatetags.review import money

_SUBJECT = {
    ReviewEvent.ENTERED_QUEUE: "Review needed",
    ReviewEvent.SLA_PASSED: "Overdue",
    ReviewEvent.DECISION_CONTRADICTED: "Decision contradicted",
}
_WHAT_HAPPENED = {
    ReviewEvent.ENTERED_QUEUE: "waits for a person's review",
    ReviewEvent.SLA_PASSED: "has waited for a person's review past its target's review SLA",
    ReviewEvent.DECISION_CONTRADICTED: (
        "had a person's decision, and evidence now contradicts it: it waits for a review again"
    ),
}
# Failures raised before anything reached the receiver: the send can be tried again.
_WEBHOOK_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class Delivery(enum.StrEnum):
    SENT = "sent"
    NOT_SENT = "not_sent"  # certainly not delivered: the claim is given back, to retry
    MAYBE_SENT = "maybe_sent"  # it may have been delivered: kept claimed, never sent again
    NOTHING_TO_SEND = "nothing_to_send"  # nobody to tell, or the effect waits no more
    TAKEN = "taken"  # another run claimed it, or sent it already


@dataclass(frozen=True)
class Message:
    """What both channels say of one notice."""

    subject: str
    body: str
    payload: dict[str, Any]


def send_review_notice(*, notice_id: int) -> dict[NoticeChannel, Delivery]:
    """Send the notice's email and webhook, each at most once; what became of each."""
    notice = selectors.review_notice_get(notice_id=notice_id)
    if notice is None:
        return {}
    effect = selectors.review_notice_effect(notice=notice)
    if effect is None:
        for channel in NoticeChannel:
            services.review_notice_skip(
                notice_id=notice_id,
                channel=channel,
                why="not sent: the effect no longer waits as this notice says (decided since)",
            )
        return dict.fromkeys(NoticeChannel, Delivery.NOTHING_TO_SEND)
    message = review_message(notice=notice, effect=effect)
    return {
        NoticeChannel.EMAIL: _send_email(notice, message),
        NoticeChannel.WEBHOOK: _send_webhook(notice, message),
    }


def review_message(*, notice: ReviewNotice, effect: Effect) -> Message:
    """The notice in words (an email's subject and body) and as the webhook's JSON."""
    amount = None if effect.amount_minor is None else money(effect.amount_minor, effect.currency)
    what = effect.action if amount is None else f"{effect.action} of {amount}"
    event = ReviewEvent(notice.event)
    review = selectors.effect_review(effect=effect)
    decision = review.last_resolution if event == ReviewEvent.DECISION_CONTRADICTED else None
    decided = None if decision is None else decision.body_value()
    url = settings.NOTARY_PUBLIC_URL + reverse("admin:notary_effect_change", args=[effect.pk])
    review_due: datetime | None = getattr(effect, "review_due", None)
    lines = [
        f"The {what} on {effect.case_id}, sent to {effect.target} (tenant {effect.tenant.slug}), "
        f"{_WHAT_HAPPENED[event]}.",
        review.sentence,
    ]
    if decided is not None and decision is not None:
        verdict = "it happened" if decided.get("happened") else "it did not happen"
        lines.append(
            f"{decided.get('by')} decided {verdict}, on {_when(decision.created_at)} "
            f"(ledger entry {decision.seq}); evidence recorded since says otherwise."
        )
    lines += [f"What contradicts it: {c['detail']}." for c in review.receipt.contradictions]
    if effect.queued_at is not None:
        due = f", and its review is due by {_when(review_due)}" if review_due else ""
        lines.append(f"It has waited since {_when(effect.queued_at)}{due}.")
    lines.append(f"Review it here: {url}")
    payload = {
        "type": f"review.{event}",
        "tenant": effect.tenant.slug,
        "effect_id": effect.effect_id,
        "case_id": effect.case_id,
        "target": effect.target,
        "action": effect.action,
        "amount_minor": effect.amount_minor,
        "currency": effect.currency,
        "amount": amount,
        "waiting_since": _iso(effect.queued_at),
        "review_due": _iso(review_due),
        "url": url,
        "sentence": review.sentence,
        "contradictions": [dict(c) for c in review.receipt.contradictions],
        "decision": None
        if decided is None or decision is None
        else {
            "by": decided.get("by"),
            "happened": decided.get("happened"),
            "reason": decided.get("reason"),
            "seq": decision.seq,
            "at": _iso(decision.created_at),
        },
    }
    subject = f"{_SUBJECT[event]}: {what} on {effect.case_id} ({effect.tenant.slug})"
    return Message(subject=subject, body="\n\n".join(lines) + "\n", payload=payload)


def _when(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _send_email(notice: ReviewNotice, message: Message) -> Delivery:
    recipients = selectors.review_recipients(tenant=notice.tenant)
    channel = NoticeChannel.EMAIL
    if not recipients:
        services.review_notice_skip(
            notice_id=notice.pk,
            channel=channel,
            why="not sent: no addresses are configured and no active Finance reviewer has one",
        )
        return Delivery.NOTHING_TO_SEND
    claimed_at = services.review_notice_claim(
        notice_id=notice.pk, channel=channel, destination=", ".join(recipients)
    )
    if claimed_at is None:
        return Delivery.TAKEN
    email = mail.EmailMessage(message.subject, message.body, to=recipients)
    delivery, error = _deliver_email(email)
    if delivery == Delivery.NOT_SENT:
        return _not_sent(notice, channel, claimed_at, error)
    services.review_notice_record(notice_id=notice.pk, channel=channel, error=error)
    return delivery


def _deliver_email(email: mail.EmailMessage) -> tuple[Delivery, str]:
    """Send it; SENT, NOT_SENT when the failure proves the server did not take it, else
    MAYBE_SENT; and the error."""
    connection = mail.get_connection(timeout=settings.NOTARY_NOTIFY_TIMEOUT_SECONDS)
    try:
        try:
            connection.open()  # nothing is sent before the server accepts the connection
        except (OSError, smtplib.SMTPException) as unreached:
            return Delivery.NOT_SENT, f"could not reach the mail server: {unreached!r}"
        try:
            sent = connection.send_messages([email])
        except (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused) as refused:
            # The server answered no (to the sender, the recipients or the message itself).
            return Delivery.NOT_SENT, f"the mail server refused it: {refused}"
        except (OSError, smtplib.SMTPException) as lost:
            return Delivery.MAYBE_SENT, f"may have been delivered, so not sent again: {lost!r}"
    finally:
        with contextlib.suppress(OSError, smtplib.SMTPException):
            connection.close()
    if not sent:
        return Delivery.NOT_SENT, "the mail backend sent nothing"
    return Delivery.SENT, ""


def _send_webhook(notice: ReviewNotice, message: Message) -> Delivery:
    hook = selectors.review_webhook(tenant=notice.tenant)
    channel = NoticeChannel.WEBHOOK
    if hook is None:
        services.review_notice_skip(
            notice_id=notice.pk, channel=channel, why="not sent: no webhook is configured"
        )
        return Delivery.NOTHING_TO_SEND
    url, secret = hook
    claimed_at = services.review_notice_claim(notice_id=notice.pk, channel=channel, destination=url)
    if claimed_at is None:
        return Delivery.TAKEN
    body = json.dumps(message.payload)
    message_id = f"notice_{notice.pk}"  # the same on every try: a receiver dedupes on it
    signed_at = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(signed_at.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, signed_at, body),
    }
    try:
        response = httpx.post(
            url,
            content=body.encode(),
            headers=headers,
            timeout=settings.NOTARY_NOTIFY_TIMEOUT_SECONDS,
        )
    except _WEBHOOK_NOT_SENT as unreached:
        return _not_sent(notice, channel, claimed_at, f"could not connect: {unreached!r}")
    except httpx.HTTPError as lost:  # sent, and then no answer (a timeout, a dropped connection)
        error = f"may have been delivered, so not sent again: {lost!r}"
        services.review_notice_record(notice_id=notice.pk, channel=channel, error=error)
        return Delivery.MAYBE_SENT
    if not response.is_success:
        why = f"the receiver answered {response.status_code}: {response.text[:200]}"
        return _not_sent(notice, channel, claimed_at, why)
    services.review_notice_record(notice_id=notice.pk, channel=channel, error="")
    return Delivery.SENT


def _not_sent(
    notice: ReviewNotice, channel: NoticeChannel, claimed_at: datetime, error: str
) -> Delivery:
    services.review_notice_release(
        notice_id=notice.pk, channel=channel, claimed_at=claimed_at, error=error
    )
    return Delivery.NOT_SENT
