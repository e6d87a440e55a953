"""The gate: DESIGN §2's five rules and §3's recovery by tier, over any Journal and Target.

submit: write the decision (PROPOSED) durably; refuse a changed payload; return the receipt of
an effect that already ended; check the premises, then record DISPATCHED atomically with the
lease check; only then call the target. recover: settle every effect left unfinished by the
target's tier, re-checking lease and premises before any resend, because a resend is a new
dispatch and an outage is exactly when the world moves."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.journal import (
    AttemptTaken,
    DispatchRequest,
    Journal,
    LeaseRefused,
    has_verdict,
    last_attempt,
    utc_now,
)
from gate_client.proposal import Premise, Proposal
from gate_client.receipts import Receipt, derive_receipt
from gate_client.targets import Found, InDoubt, NotFound, Sent, Target, Tier, Unknown
from ledger.core.entries import Entry, EntryKind

PremisesFor = Callable[[Mapping[str, Any]], Sequence[Premise]]


class Gate:
    def __init__(
        self,
        journal: Journal,
        targets: Mapping[str, Target],
        *,
        premises_for: PremisesFor = lambda proposed: (),
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`premises_for` rebuilds an effect's premises from its PROPOSED body at recovery,
        when the process that proposed it is gone."""
        self.journal = journal
        self.targets = targets
        self.premises_for = premises_for
        self.clock = clock
        self.sleep = sleep

    def submit(self, proposal: Proposal) -> Receipt:
        target = self._target(proposal.target)
        effect_id = proposal.effect_id
        premises = [p.evaluate() for p in proposal.premises]
        body = proposal.proposed_body(premises)
        history: list[Entry] | None = None
        if all(p["holds"] for p in premises):
            # One round trip where the journal offers it: PROPOSED and DISPATCHED together.
            crash_point(CrashPoint.BEFORE_PROPOSED)
            request = DispatchRequest.of_proposal(effect_id, body, 1, premises, False)
            try:
                started = self.journal.propose_and_dispatch(
                    effect_id=effect_id, body=body, request=request
                )
            except LeaseRefused as refused:
                details = {"detail": refused.detail}
                return self._refuse(effect_id, refused.reason, details, False)
            if started is not None:
                history, dispatched = started
                if dispatched is not None:
                    return self._send(effect_id, body, target, 1, premises, False)
        if history is None:
            history = self.journal.history(effect_id)
            if _proposed_entry(history) is None:
                crash_point(CrashPoint.BEFORE_PROPOSED)
                self.journal.propose(effect_id=effect_id, body=body)
                crash_point(CrashPoint.AFTER_PROPOSED)
                history = self.journal.history(effect_id)
        proposed = _proposed(history)
        if proposed["payload_hash"] != proposal.payload_hash:
            # The first payload stands: a re-decided payload is refused, never sent.
            standing = proposed["payload_hash"]
            self.journal.record(
                kind=EntryKind.REFUSED,
                effect_id=effect_id,
                body={
                    "reason": "payload_changed",
                    "payload_hash": proposal.payload_hash,
                    "standing_payload_hash": standing,
                },
            )
            return self._receipt(effect_id, payload_hash=proposal.payload_hash)
        elif has_verdict(history):
            return self._receipt(effect_id)  # already ended: send nothing
        elif last_attempt(history):
            return self._recover_effect(effect_id)
        return self._first_dispatch(
            effect_id, proposed, target, proposal.premises, recovering=False
        )

    def recover(self) -> list[Receipt]:
        """Settle every effect that was proposed or dispatched and has no verdict yet."""
        return [self._recover_effect(effect_id) for effect_id in self.journal.unsettled()]

    # --- recovery by tier --------------------------------------------------------------------

    def _recover_effect(self, effect_id: str) -> Receipt:
        history = self.journal.history(effect_id)
        if has_verdict(history):
            return self._receipt(effect_id)  # settled meanwhile, by another process
        proposed = _proposed(history)
        target = self._target(proposed["target"])
        premises = self.premises_for(proposed)
        dispatches = [e for e in history if e.kind == EntryKind.DISPATCHED]
        if not dispatches:
            # The decision was durable and nothing was sent: dispatch it now, checked anew.
            return self._first_dispatch(effect_id, proposed, target, premises, recovering=True)
        attempt = dispatches[-1].body_value()["attempt"]
        tier = target.tier
        if (
            tier == Tier.DEDUPES
            and target.key_window is not None
            and self.clock() - dispatches[0].created_at >= target.key_window
        ):
            tier = Tier.NEITHER  # the key is forgotten: a resend could act twice
        if tier == Tier.NEITHER and target.evidence_window is None:
            return self._ambiguous(effect_id, {"reason": "tier 3: nothing to ask, never resend"})
        if tier == Tier.NEITHER:
            return self._recover_on_evidence(effect_id, proposed, target, premises, attempt)
        if tier == Tier.DEDUPES:
            failure, results = self._recheck(proposed, premises)
            if failure is None:
                return self._resend(effect_id, proposed, target, attempt + 1, results)
            return self._ask_then_settle(effect_id, target, failure)
        answer = self._ask(effect_id, target)
        if isinstance(answer, Found):
            return self._commit(
                effect_id, attempt, "COMMITTED_ON_QUERY", answer.result_ref, {"lookup": "found"}
            )
        if isinstance(answer, Unknown):
            return self._ambiguous(effect_id, {"lookup": "unknown", "detail": answer.reason})
        failure, results = self._recheck(proposed, premises)
        if failure is None:
            return self._resend(effect_id, proposed, target, attempt + 1, results)
        return self._refuse_at_recovery(effect_id, failure, "not_found")

    def _recover_on_evidence(
        self,
        effect_id: str,
        proposed: Mapping[str, Any],
        target: Target,
        premises: Sequence[Premise],
        attempt: int,
    ) -> Receipt:
        """Tier 3 lifted to tier 2 by the notary's evidence. Found: it happened. Not seen while
        the window is open: still in flight, which evidence settles at the notary as it arrives
        and a recover() after the window decides; nobody is asked yet. Not seen by then, or seen
        not done: it counts as not sent, so re-check and resend, the assumption stated. A
        journal with no window to wait for: AMBIGUOUS."""
        answer = self.journal.evidence(effect_id)
        if isinstance(answer, Found):
            found = {"evidence": "found"}
            return self._commit(
                effect_id, attempt, "COMMITTED_ON_EVIDENCE", answer.result_ref, found
            )
        if isinstance(answer, Unknown) and answer.until is not None:
            return self._receipt(effect_id)
        if isinstance(answer, Unknown):
            return self._ambiguous(effect_id, {"evidence": "none", "detail": answer.reason})
        failure, results = self._recheck(proposed, premises)
        if failure is None:
            assumed = {"evidence": "not seen within the evidence window: taken as not sent"}
            return self._resend(effect_id, proposed, target, attempt + 1, results, assumed)
        return self._refuse_at_recovery(effect_id, failure, "not_seen")

    def _recheck(
        self, proposed: Mapping[str, Any], premises: Sequence[Premise]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """What would stop a dispatch now (None if nothing), and the premises as observed."""
        request = DispatchRequest.of_proposal("", proposed, 0, [], True)
        lease = self.journal.lease_state(proposed["lease_id"])
        refusal = request.lease_refusal(lease, now=self.clock())
        if refusal is not None:
            return {"reason": refusal[0], "detail": refusal[1]}, []
        results, failed = _evaluate(premises)
        if failed:
            return {"reason": "stale_premise", "failed": failed, "premises": results}, results
        return None, results

    def _ask_then_settle(
        self, effect_id: str, target: Target, failure: Mapping[str, Any]
    ) -> Receipt:
        """A re-check failed, so no resend: only the target can still say what happened."""
        if not target.queryable:
            return self._ambiguous(effect_id, {**failure, "lookup": None})
        answer = self._ask(effect_id, target)
        if isinstance(answer, Found):
            attempt = last_attempt(self.journal.history(effect_id))
            recheck = {**failure, "lookup": "found"}
            return self._commit(
                effect_id, attempt, "COMMITTED_ON_QUERY", answer.result_ref, recheck
            )
        if isinstance(answer, NotFound):
            return self._refuse_at_recovery(effect_id, failure, "not_found")
        return self._ambiguous(effect_id, {**failure, "lookup": "unknown"})

    def _ask(self, effect_id: str, target: Target) -> Found | NotFound | Unknown:
        """Look the effect up. "Not found" is conclusive only once the last request can no
        longer be in flight; until then a not-found waits and asks again."""
        history = self.journal.history(effect_id)
        payload = _proposed(history)["payload"]
        dispatches = [e for e in history if e.kind == EntryKind.DISPATCHED]
        settled_at = dispatches[-1].created_at + target.max_inflight
        while True:
            answer = target.lookup(effect_id, payload)
            remaining = (settled_at - self.clock()).total_seconds()
            if isinstance(answer, Found) or remaining <= 0:
                return answer
            self.sleep(min(remaining, 1.0))

    # --- dispatching ---------------------------------------------------------------------------

    def _first_dispatch(
        self,
        effect_id: str,
        proposed: Mapping[str, Any],
        target: Target,
        premises: Sequence[Premise],
        *,
        recovering: bool,
    ) -> Receipt:
        """Attempt 1: nothing was sent before, so a failed check is a plain refusal."""
        suffix = "_at_recovery" if recovering else ""
        results, failed = _evaluate(premises)
        if failed:
            details = {"failed": failed, "premises": results}
            return self._refuse(effect_id, "stale_premise" + suffix, details, recovering)
        try:
            self.journal.dispatch(
                DispatchRequest.of_proposal(effect_id, proposed, 1, results, recovering)
            )
        except LeaseRefused as refused:
            details = {"detail": refused.detail}
            return self._refuse(effect_id, refused.reason + suffix, details, recovering)
        except AttemptTaken:
            return self._receipt(effect_id)  # another process dispatched it; its outcome stands
        return self._send(effect_id, proposed, target, 1, results, recovering)

    def _resend(
        self,
        effect_id: str,
        proposed: Mapping[str, Any],
        target: Target,
        attempt: int,
        results: list[dict[str, Any]],
        assumed: Mapping[str, Any] | None = None,
    ) -> Receipt:
        """A resend after a dispatch that may have acted, just re-checked; `assumed` is what
        the resend takes for granted, stated on the receipt."""
        try:
            self.journal.dispatch(
                DispatchRequest.of_proposal(effect_id, proposed, attempt, results, True)
            )
        except LeaseRefused as refused:
            # Revoked between the re-check and the dispatch: an earlier attempt may have acted.
            failure = {"reason": refused.reason, "detail": refused.detail}
            return self._ask_then_settle(effect_id, target, failure)
        except AttemptTaken:
            return self._receipt(effect_id)
        return self._send(effect_id, proposed, target, attempt, results, True, assumed)

    def _send(
        self,
        effect_id: str,
        proposed: Mapping[str, Any],
        target: Target,
        attempt: int,
        results: list[dict[str, Any]],
        recovering: bool,
        assumed: Mapping[str, Any] | None = None,
    ) -> Receipt:
        crash_point(CrashPoint.AFTER_DISPATCHED)
        try:
            outcome = target.send(effect_id, proposed["payload"])
        except InDoubt:
            if recovering:
                return self._receipt(effect_id)  # still in flight: the next recover() goes on
            return self._recover_effect(effect_id)
        crash_point(CrashPoint.AFTER_RESPONSE)
        if isinstance(outcome, Sent):
            state = "COMMITTED_BY_RETRY" if attempt > 1 else "COMMITTED"
            recheck = {"premises": results, **(assumed or {})} if recovering else None
            return self._commit(effect_id, attempt, state, outcome.result_ref, recheck)
        body = {"attempt": attempt, "code": outcome.code}
        return self._record(effect_id, EntryKind.FAILED, body)

    # --- verdicts ------------------------------------------------------------------------------

    def _commit(
        self,
        effect_id: str,
        attempt: int,
        state: str,
        result_ref: str,
        recheck: Mapping[str, Any] | None,
    ) -> Receipt:
        body = {"state": state, "attempt": attempt, "result_ref": result_ref, "recheck": recheck}
        return self._record(effect_id, EntryKind.COMMITTED, body)

    def _refuse(
        self, effect_id: str, reason: str, details: Mapping[str, Any], recovering: bool
    ) -> Receipt:
        recheck = dict(details) if recovering else None
        return self._record(
            effect_id, EntryKind.REFUSED, {**details, "reason": reason, "recheck": recheck}
        )

    def _refuse_at_recovery(
        self, effect_id: str, failure: Mapping[str, Any], lookup: str
    ) -> Receipt:
        """The target says it never acted and a re-check failed: known not sent, and refused."""
        details = {**failure, "lookup": lookup}
        return self._refuse(effect_id, failure["reason"] + "_at_recovery", details, True)

    def _ambiguous(self, effect_id: str, recheck: Mapping[str, Any]) -> Receipt:
        return self._record(effect_id, EntryKind.AMBIGUOUS, {"recheck": dict(recheck)})

    def _record(self, effect_id: str, kind: EntryKind, body: Mapping[str, Any]) -> Receipt:
        self.journal.record(kind=kind, effect_id=effect_id, body=body)
        return self._receipt(effect_id)

    def _receipt(self, effect_id: str, *, payload_hash: str | None = None) -> Receipt:
        entries = self.journal.receipt_entries(effect_id)
        return derive_receipt(entries, effect_id, payload_hash=payload_hash)

    def _target(self, name: str) -> Target:
        try:
            return self.targets[name]
        except KeyError:
            known = ", ".join(self.targets)
            raise KeyError(f"no target named {name!r}; known: {known}") from None


def _evaluate(premises: Sequence[Premise]) -> tuple[list[dict[str, Any]], list[str]]:
    results = [p.evaluate() for p in premises]
    return results, [r["name"] for r in results if not r["holds"]]


def _proposed_entry(history: Sequence[Entry]) -> Entry | None:
    return next((e for e in history if e.kind == EntryKind.PROPOSED), None)


def _proposed(history: Sequence[Entry]) -> dict[str, Any]:
    entry = _proposed_entry(history)
    if entry is None:
        raise LookupError("effect has no PROPOSED entry")
    body: dict[str, Any] = entry.body_value()
    return body
