"""The gate: DESIGN §2's five rules and §3's recovery by tier, over any Journal and Target.

submit: write the decision (PROPOSED) durably; refuse a changed payload; return the receipt of
an effect that already ended; check the premises, then record DISPATCHED atomically with the
lease check; only then call the target. recover: settle every effect left unfinished by the
target's tier, re-checking lease and premises before any resend, because a resend is a new
dispatch and an outage is exactly when the world moves."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gate_client.authorization import DispatchRequest, proposal_refusal
from gate_client.faults import CrashPoint, crash_point
from gate_client.journal import (
    AttemptTaken,
    EffectHeld,
    Journal,
    LeaseRefused,
    utc_now,
)
from gate_client.proposal import Premise, Proposal
from gate_client.protocol import (
    Answer,
    Ask,
    CheckAgain,
    Dispatch,
    Facts,
    HeldOnEvidence,
    Recheck,
    Record,
    Settled,
    TargetDeclaration,
    Wait,
    decide,
    last_attempt,
    late_request,
    premise_failure,
    sent_body,
    standing,
)
from gate_client.receipts import Receipt, derive_receipt
from gate_client.targets import InDoubt, Sent, Target
from ledger.core.entries import Entry, EntryKind

PremisesFor = Callable[[Mapping[str, Any]], Sequence[Premise]]


class TargetMismatch(ValueError):
    """An adapter declares its target otherwise than the journal's record of it (the notary's
    target record): recovery would go by a declaration the target does not have."""


class AmbiguousMoney(ValueError):
    """The payload's money does not read one way by its target's declaration
    (gate_client.money): refused before PROPOSED, nothing written, nothing sent."""


class Gate:
    def __init__(
        self,
        journal: Journal,
        targets: Mapping[str, Target],
        *,
        premises_for: PremisesFor = lambda proposed: (),
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        patience: timedelta = timedelta(seconds=60),
    ) -> None:
        """`premises_for` rebuilds an effect's premises from its PROPOSED body at recovery,
        when the process that proposed it is gone. `patience` is the longest the gate waits
        for a verdict the protocol says may still come (another process's attempt, a request
        still in flight); past it the effect is returned still in flight, for a later
        recover() or the notary's sweep.

        A journal that keeps the targets' declarations (the notary) is asked for each once, at
        its first use, and a target declared otherwise there is refused with TargetMismatch
        before anything of it is written. Constructing a gate does no I/O, so an agent started
        during an outage fails closed on its first effect, where it handles journal errors."""
        self.journal = journal
        self.targets = targets
        self.premises_for = premises_for
        self.clock = clock
        self.sleep = sleep
        self.patience = patience
        self._declared: dict[str, TargetDeclaration] = {}

    def declared(self, name: str) -> TargetDeclaration:
        """The target's declaration, once the journal's record of it (if it keeps one) agrees
        with the adapter's."""
        declaration = self._declared.get(name)
        if declaration is None:
            declaration = TargetDeclaration.of(self._target(name))
            held = self.journal.target_declaration(name)
            if held is not None and (differences := declaration.differences(held)):
                raise TargetMismatch(
                    f"target {name!r} is declared otherwise at the journal (adapter != record): "
                    + "; ".join(differences)
                )
            self._declared[name] = declaration
        return declaration

    def submit(self, proposal: Proposal) -> Receipt:
        target = self._target(proposal.target)
        declared = self.declared(proposal.target)
        ambiguous = proposal_refusal(proposal.payload, declared)
        if ambiguous is not None:
            raise AmbiguousMoney(f"{proposal.target}: {ambiguous}")  # before anything is written
        effect_id = proposal.effect_id
        premises = [p.evaluate() for p in proposal.premises]
        body = proposal.proposed_body(premises, declared)
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
                # Decided as any refused dispatch is: evidence on record that it was performed
                # (before any dispatch) holds it for a person instead of a refusal that says
                # it never happened.
                failure = Recheck({"reason": refused.reason, "detail": refused.detail}, premises)
                return self._settle(
                    effect_id, premises=proposal.premises, recovering=False, recheck=failure
                )
            except EffectHeld:
                return self.receipt(effect_id)  # HELD: submit again once a person resolves it
            if started is not None:
                history, dispatched = started
                if dispatched is not None:
                    step = Dispatch(1, premises)
                    return self._send(effect_id, body, target, step, dispatched, False)
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
            standing_hash = proposed["payload_hash"]
            self.journal.record(
                kind=EntryKind.REFUSED,
                effect_id=effect_id,
                body={
                    "reason": "payload_changed",
                    "payload_hash": proposal.payload_hash,
                    "standing_payload_hash": standing_hash,
                },
            )
            return self.receipt(effect_id, payload_hash=proposal.payload_hash)
        # A first dispatch checks the proposal's premises once more; an effect met in flight
        # recovers by its tier.
        first = not last_attempt(history)
        return self._settle(
            effect_id,
            history=history,
            premises=proposal.premises if first else None,
            recovering=not first,
        )

    def recover(self) -> list[Receipt]:
        """Settle every effect that was proposed or dispatched and has no verdict yet."""
        return [self._settle(effect_id) for effect_id in self.journal.unsettled()]

    # --- recovery by tier: the protocol decides, the gate carries it out ------------------------

    def _settle(
        self,
        effect_id: str,
        *,
        history: list[Entry] | None = None,
        premises: Sequence[Premise] | None = None,
        recovering: bool = True,
        dispatched_here: bool = False,
        recheck: Recheck | None = None,
    ) -> Receipt:
        """Ask the protocol for the next step and take it, until it settles, sends, is held, or
        says wait longer than `patience`. Re-checks evaluate `premises`, by default the ones
        `premises_for` rebuilds from the PROPOSED body; `recheck`, one made already."""
        try:
            return self._steps(effect_id, history, premises, recovering, dispatched_here, recheck)
        except EffectHeld:
            # No verdict: the proposal stands, HELD, to be submitted again once a person has
            # resolved the effect holding it.
            return self.receipt(effect_id)

    def _steps(
        self,
        effect_id: str,
        history: list[Entry] | None,
        premises: Sequence[Premise] | None,
        recovering: bool,
        dispatched_here: bool,
        recheck: Recheck | None,
    ) -> Receipt:
        answer: Answer | None = None
        history = self.journal.history(effect_id) if history is None else history
        while True:
            proposed = _proposed(history)
            target = self._target(proposed["target"])
            facts = Facts(
                history=history,
                declared=self.declared(proposed["target"]),
                now=self.clock(),
                answer=answer,
                recheck=recheck,
                dispatched_here=dispatched_here,
                recovering=recovering,
            )
            step = decide(facts)
            if isinstance(step, Settled | HeldOnEvidence):
                # Held on evidence: it was done, at odds with the record; a person decides.
                return self.receipt(effect_id)
            if isinstance(step, Ask):
                answer = self._ask(effect_id, proposed, target, step)
            elif isinstance(step, CheckAgain):
                recheck = self._recheck(proposed, premises)
            elif isinstance(step, Record):
                return self._record(effect_id, step)
            elif isinstance(step, Wait):
                waited = self._wait_for_verdict(effect_id, step)
                if waited is None:
                    return self.receipt(effect_id)  # still in flight; settled later
                answer, recheck, history = None, None, waited
            else:
                dispatch = DispatchRequest.of_proposal(
                    effect_id, proposed, step.attempt, step.premises, recovering
                )
                try:
                    dispatched = self.journal.dispatch(dispatch)
                except LeaseRefused as refused:
                    # Refused between the re-check and the dispatch: decide on that.
                    recheck = Recheck({"reason": refused.reason, "detail": refused.detail})
                    history = self.journal.history(effect_id)
                    continue
                except AttemptTaken:
                    # Another process dispatched it: a live attempt, whose outcome we wait for.
                    answer, recheck, dispatched_here = None, None, False
                    history = self.journal.history(effect_id)
                    continue
                return self._send(effect_id, proposed, target, step, dispatched, recovering)

    def _ask(
        self, effect_id: str, proposed: Mapping[str, Any], target: Target, step: Ask
    ) -> Answer:
        if step.source == "notary":
            return self.journal.evidence(effect_id)
        return target.lookup(effect_id, proposed["payload"])

    def _wait_for_verdict(self, effect_id: str, step: Wait) -> list[Entry] | None:
        """Sleep until `step.until`, watching for a verdict another process records; the
        effect's entries as last read, or None if the wait is longer than the gate's patience."""
        if step.until - self.clock() > self.patience:
            return None
        history = self.journal.history(effect_id)
        while (remaining := (step.until - self.clock()).total_seconds()) > 0:
            self.sleep(min(remaining, 1.0))
            history = self.journal.history(effect_id)
            if standing(history).state is not None:
                break
        return history

    def _recheck(self, proposed: Mapping[str, Any], premises: Sequence[Premise] | None) -> Recheck:
        """The premises as observed now, and the failure they would refuse a dispatch with.
        The lease is checked by the journal itself, atomically with recording DISPATCHED; a
        refusal there comes back as this step's failure."""
        checked = self.premises_for(proposed) if premises is None else premises
        results = [p.evaluate() for p in checked]
        return Recheck(premise_failure(results), results)

    # --- sending --------------------------------------------------------------------------------

    def _send(
        self,
        effect_id: str,
        proposed: Mapping[str, Any],
        target: Target,
        step: Dispatch,
        dispatched: Entry,
        recovering: bool,
    ) -> Receipt:
        """Call the target for the attempt just recorded, unless its acknowledgement came too
        late to start the request (protocol.late_request): then recovery decides, here once
        for a first dispatch, else at the next recover()."""
        crash_point(CrashPoint.AFTER_DISPATCHED)
        if late_request(self.declared(proposed["target"]), dispatched, self.clock()) is not None:
            return self.receipt(effect_id) if recovering else self._settle(effect_id)
        try:
            outcome = target.send(effect_id, proposed["payload"])
        except InDoubt:
            if recovering:
                return self.receipt(effect_id)  # in doubt again: the next recover() goes on
            return self._settle(effect_id, dispatched_here=True)
        crash_point(CrashPoint.AFTER_RESPONSE)
        if isinstance(outcome, Sent):
            premises = [dict(p) for p in step.premises]
            recheck = {"premises": premises, **(step.assumed or {})} if recovering else None
            body = sent_body(step.attempt, outcome.result_ref, recheck)
            return self._record(effect_id, Record(EntryKind.COMMITTED, body))
        body = {"attempt": step.attempt, "code": outcome.code}
        return self._record(effect_id, Record(EntryKind.FAILED, body))

    # --- verdicts ------------------------------------------------------------------------------

    def _record(self, effect_id: str, step: Record) -> Receipt:
        self.journal.record(kind=step.kind, effect_id=effect_id, body=step.body)
        return self.receipt(effect_id)

    def receipt(self, effect_id: str, *, payload_hash: str | None = None) -> Receipt:
        """The effect's receipt as the journal's entries give it now, derived here (never
        taken from the journal's word); with `payload_hash`, that of a refused re-decided
        payload. ReceiptError if the journal has no such effect."""
        entries = self.journal.receipt_entries(effect_id)
        return derive_receipt(entries, effect_id, payload_hash=payload_hash)

    def _target(self, name: str) -> Target:
        try:
            return self.targets[name]
        except KeyError:
            known = ", ".join(self.targets)
            raise KeyError(f"no target named {name!r}; known: {known}") from None


def _proposed_entry(history: Sequence[Entry]) -> Entry | None:
    return next((e for e in history if e.kind == EntryKind.PROPOSED), None)


def _proposed(history: Sequence[Entry]) -> dict[str, Any]:
    entry = _proposed_entry(history)
    if entry is None:
        raise LookupError("effect has no PROPOSED entry")
    body: dict[str, Any] = entry.body_value()
    return body
