"""Temporal: run the gate inside an activity, so that a retried activity sends its effect once.

Why. Temporal retries an activity whose worker crashed, whose attempt timed out, or which
raised: it runs the function again from the top. Without the gate a retry re-runs the side
effect, so an attempt killed after the target acted but before Temporal heard back (the email
went out, the worker died) sends it twice on the next attempt.

How. The effect id comes from the case, never from the attempt: every attempt of the activity
builds the same Proposal (same case, target and action), so every attempt lands on the same
effect in the journal. The gate then does what it does after any crash: an effect that already
ended returns its receipt and sends nothing; one left DISPATCHED by a dead attempt is recovered
by the target's tier (tier 1 resends under the same idempotency key, tier 2 looks it up and
resends only if it is not found, tier 3 never resends and says AMBIGUOUS). What the gate cannot
settle goes back to Temporal as an ApplicationError: retryable only while the effect is still in
flight, since a retry is then exactly the recovery it needs; never for a refusal, a failure or
an ambiguity, which a retry would only repeat.

Use, from a sync (``def``) activity, on a worker given an ``activity_executor``::

    gate = Gate(journal, targets, premises_for=..., sleep=heartbeating_sleep)

    @activity.defn
    def send_refund_email(text: str) -> dict[str, Any]:
        proposal = Proposal(
            case_id=activity_case_id(),  # or, better, your own business case id
            target="email",
            action="refund_email",
            payload={"to": ..., "text": text},
            lease_id=...,
        )
        return submit_in_activity(gate, proposal)

Timeouts: no heartbeat is sent while a request is on the wire, so the activity's
``heartbeat_timeout`` must exceed the target's request timeout; ``start_to_close_timeout`` must
cover a send, the target's ``max_inflight`` wait and a resend. With a shorter one Temporal starts
the next attempt while this one may still run: the gate settles that overlap as it settles a
crash (one dispatch per attempt number in the journal, a lookup's "not found" trusted only after
``max_inflight``), but the attempt that ran out of time cannot hand back its result. The
workflow sees a refusal as an ``ActivityError`` whose ``cause`` is the ApplicationError that
`submit_in_activity` describes."""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from gate_client.adapters.outcomes import (
    EffectHeldForPerson,
    EffectInFlight,
    EffectNotDone,
    committed_result_ref,
    raise_unless_committed,
)
from gate_client.gate import Gate
from gate_client.proposal import Proposal

HEARTBEAT_EVERY_SECONDS = 1.0  # at most; less when the activity's heartbeat timeout is short


def submit_in_activity(gate: Gate, proposal: Proposal) -> dict[str, Any]:
    """Submit `proposal` through `gate` from inside a sync activity; return what the activity
    should return.

    Committed (at once, by a retry, on a lookup): ``{"receipt": Receipt.to_dict(),
    "result_ref": the target's reference}``, all JSON. Otherwise an ApplicationError whose
    ``type`` is the receipt's final state up to its first colon and whose one detail is the
    receipt as a dict:

    - ``REFUSED`` (lease, premise, changed payload), ``FAILED`` (the target said no),
      ``AMBIGUOUS`` or ``RESOLVED_*`` (only a person can say whether it happened):
      non-retryable, because another attempt would find the same verdict in the journal;
    - ``DISPATCHED`` (the target stayed in doubt even after recovery) or ``PROPOSED``: still in
      flight, so retryable, because the next attempt recovers the effect by its tier.

    Cancellation: Temporal cancels a sync activity by raising an exception in its thread, at
    whatever line it is on. Here that could fall between a journal lock and its release, or
    between the target's answer and its record, so the gate runs shielded from it: the cancel
    takes effect where the gate waits (`heartbeating_sleep` raises CancelledError there, with
    nothing half-written and nothing resent), or else once `gate.submit` has returned. A
    cancelled attempt may thus have committed, or left the effect in flight; either way the
    journal says which, and a later attempt or `gate.recover()` carries on from there.
    Any other exception (an unknown target, an unreachable journal) propagates as it is."""
    shield = (
        activity.shield_thread_cancel_exception()
        if activity.in_activity()
        else contextlib.nullcontext()
    )
    with shield:
        receipt = gate.submit(proposal)
        try:
            raise_unless_committed(receipt)
        except (EffectInFlight, EffectHeldForPerson) as error:  # no verdict yet: retried
            raise _application_error(error, non_retryable=False) from error
        except EffectNotDone as error:  # refused, failed, ambiguous: the journal has a verdict
            raise _application_error(error, non_retryable=True) from error
        result_ref = committed_result_ref(gate.journal, receipt.effect_id)
    return {"receipt": receipt.to_dict(), "result_ref": result_ref}


def activity_case_id() -> str:
    """The running activity's workflow id, as a case id (a standalone activity's own id).

    It is the same on every attempt of the activity, after a worker crash, a timeout or a
    retry, so every attempt proposes the same effect and the gate sends it at most once.

    It is also the same in every run of that workflow id: after continue-as-new, after a reset,
    on a workflow retry, and in a later execution that reuses the id. So under one workflow id a
    (target, action) names one effect, ever: a second send of it (each pass of a loop, each run
    after continue-as-new, a reused id for a new order) returns the first one's receipt, or is
    refused if its payload differs. When you have a business case id (the order, the ticket),
    pass that instead, or add a part that tells deliberate repeats apart. Never key on the run
    id or the attempt number: a reset re-runs activities under a new run id, and that is just
    where the effect must not happen twice."""
    if not activity.in_activity():
        raise RuntimeError("activity_case_id() is only meaningful inside a Temporal activity")
    info = activity.info()
    return info.workflow_id if info.workflow_id is not None else info.activity_id


def heartbeating_sleep(seconds: float) -> None:
    """`time.sleep`, heartbeating the running activity meanwhile: pass it as ``Gate(sleep=...)``.

    The gate sleeps while a lookup's "not found" cannot be trusted yet (until the target's
    ``max_inflight`` has passed since the dispatch); heartbeating keeps a recovery that waits
    from looking like a dead worker. A heartbeat is also how a sync activity hears that it was
    cancelled (or that its attempt timed out): then this raises CancelledError. That is a safe
    point to stop at: the gate holds no lock there, and its journal says exactly where the
    effect stands. Outside an activity it only sleeps."""
    seconds = max(0.0, seconds)
    if not activity.in_activity():
        time.sleep(seconds)
        return
    interval = _heartbeat_interval(activity.info().heartbeat_timeout)
    deadline = time.monotonic() + seconds
    while True:
        activity.heartbeat()
        if activity.is_cancelled():
            raise CancelledError("cancelled while the gate waited; the effect stays in flight")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(remaining, interval))


def _heartbeat_interval(heartbeat_timeout: timedelta | None) -> float:
    if heartbeat_timeout is None or heartbeat_timeout <= timedelta(0):
        return HEARTBEAT_EVERY_SECONDS
    return min(HEARTBEAT_EVERY_SECONDS, heartbeat_timeout.total_seconds() / 2)


def _application_error(error: EffectNotDone, *, non_retryable: bool) -> ApplicationError:
    receipt = error.receipt
    kind = receipt.final_state.partition(":")[0]
    return ApplicationError(str(error), receipt.to_dict(), type=kind, non_retryable=non_retryable)
