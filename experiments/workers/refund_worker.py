"""The refund agent as a process of its own, SIGKILLed at a crash point and started again.

    python -m experiments.workers.refund_worker SYSTEM --case CASE --payment PAY --amount CENTS
        (--service URL --store PATH | --stripe URL) --log PATH [options]

One support case: a $100 payment, one $20 refund approved. `--amount` is what the model decided
this time (a restarted process may be told another amount: the model re-decided). SYSTEM is:

- ``plain_retry``: POST the refund with no key; a restart runs it again.
- ``idempotency_keys``: the same with ``Idempotency-Key: refund-<case>``, stable per case; no
  lease, no premise. With ``--stripe``, the official SDK with that key against localstripe.
- ``durable_execution``: durable execution alone, no key. The model's decision is checkpointed
  to ``--checkpoint`` before the tool runs and the tool's result after it; a restart replays the
  checkpointed decision (the model is not asked again) and re-runs the tool if no result was
  checkpointed.
- ``gate``: the gate (gate_client.Gate) with the target declared at ``--tier``, a local journal
  at ``--journal`` or the notary's (``--notary``), the lease ``--lease``, and one absolute
  premise: no refund has been made for this case other than this effect's own. With
  ``--restarted`` it runs recover() first, then submits the (possibly re-decided) proposal.
  ``--attests-before-acting`` declares a service that attests each request to the notary
  before acting; ``--max-inflight`` is the request timeout and declared in-flight time.

INTERLOCK_CRASH_AT (gate_client.faults) kills the process on the way. The systems without a
journal have no PROPOSED or DISPATCHED: their before_proposed, after_proposed and
after_dispatched all fall before the request (durable_execution's after_proposed follows its
decision checkpoint). Each step prints one JSON line with the wall clock ("t"); the baselines'
own record is the JSON-lines app log at ``--log``, the gate's is its journal."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.ids import effect_id_for
from gate_client.journal import Journal, LocalJournal
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt
from gate_client.targets import Target, Tier
from testkit.peers.reference_service import read_acts

if TYPE_CHECKING:
    import stripe

SYSTEMS = ("plain_retry", "idempotency_keys", "durable_execution", "gate")
TARGET = "payments"  # the reference payment service, as the gate names it
ACTION = "refund"
LEASE_ID = "lease_refund"
KEY_WINDOW = timedelta(hours=24)  # Stripe's, for a target that dedupes
TIMEOUT_SECONDS = 1.0  # the HTTP timeout, and so the longest a request may be in flight
# The reference payment service's refunds hold their amount in amount_cents.
REFUND_MONEY = MoneyDeclaration(amount_field="amount_cents", currency_field="currency")
SUPPORT = "support"  # payload["by"] of a refund support made by hand


def baseline_key(case_id: str) -> str:
    """The baselines' stable per-case key (and the effect id field the service echoes)."""
    return f"refund-{case_id}"


def gate_effect_id(case_id: str, *, target: str = TARGET, tenant: str = "") -> str:
    return effect_id_for(case_id, target, ACTION, tenant=tenant)


def emit(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, "t": time.time(), **fields}), flush=True)


def log_line(path: Path, **fields: Any) -> None:
    """The baselines' app log: one JSON line per event, fsync'd like any careful app log."""
    line = json.dumps({"at": time.time(), **fields}) + "\n"
    with path.open("a") as log:
        log.write(line)
        log.flush()
        os.fsync(log.fileno())


# --- the world the premise reads -----------------------------------------------------------------


def service_refunds(store: Path, payment: str) -> list[dict[str, Any]]:
    """Every refund the reference service made on `payment`. It has no list endpoint; reading its
    store stands in for ``GET /payments/<id>/refunds`` (read only, the same fsync'd record)."""
    return [a for a in read_acts(store) if a["payload"].get("payment") == payment]


def case_not_refunded(store: Path, payment: str, effect_id: str) -> Premise:
    """Absolute: no refund has been made on the case's payment but this effect's own (a resend
    must not be refused for the refund it repeats)."""

    def check() -> PremiseResult:
        others = [a for a in service_refunds(store, payment) if a["effect_id"] != effect_id]
        observed = {
            "payment": payment,
            "other_refunds": [
                {"result_ref": a["result_ref"], "amount_cents": a["payload"].get("amount_cents")}
                for a in others
            ],
        }
        return PremiseResult(not others, observed)

    return Premise("case_not_refunded_yet", check)


def stripe_case_not_refunded(
    client: stripe.StripeClient, payment_intent: str, effect_id: str
) -> Premise:
    """The same premise read through Stripe's SDK: the payment's refunds that took money back,
    other than this effect's own (by its metadata)."""
    from gate_client.adapters.stripe_refunds import METADATA_KEY

    def check() -> PremiseResult:
        page = client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
        others = [
            {"id": r.id, "amount": r.amount, "status": r.status}
            for r in page.auto_paging_iter()
            if r.status in ("succeeded", "pending", "requires_action")
            and (r.metadata.to_dict() if r.metadata else {}).get(METADATA_KEY) != effect_id
        ]
        return PremiseResult(not others, {"payment_intent": payment_intent, "others": others})

    return Premise("case_not_refunded_yet", check)


# --- the baselines ---------------------------------------------------------------------------


def post_refund(args: argparse.Namespace, amount: int, *, key: str | None) -> dict[str, Any]:
    """One refund request; the crash points the service's answer passes on its way back."""
    if args.stripe:
        return _stripe_refund(args, amount, key=key)
    body = {
        "effect_id": baseline_key(args.case),
        "payload": {"payment": args.payment, "amount_cents": amount},
    }
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        f"{args.service}/effects", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        result_ref = str(json.loads(response.read())["result_ref"])
        replayed = response.headers.get("Idempotent-Replayed") == "true"
    return {"result_ref": result_ref, "replayed": replayed}


def _stripe_refund(args: argparse.Namespace, amount: int, *, key: str | None) -> dict[str, Any]:
    from gate_client.adapters.stripe_refunds import METADATA_KEY
    from testkit.peers.localstripe import stripe_client

    client = stripe_client(args.stripe, timeout_seconds=TIMEOUT_SECONDS * 2)
    options: dict[str, Any] = {"idempotency_key": key} if key is not None else {}
    refund = client.v1.refunds.create(
        params={
            "payment_intent": args.payment,
            "amount": amount,
            "metadata": {METADATA_KEY: baseline_key(args.case)},
        },
        options=options,  # type: ignore[arg-type]
    )
    crash_point(CrashPoint.AFTER_TARGET_ACTED)
    headers = refund.last_response.headers if refund.last_response is not None else {}
    return {"result_ref": refund.id, "replayed": headers.get("Idempotent-Replayed") == "true"}


def run_baseline(args: argparse.Namespace) -> None:
    """plain_retry and idempotency_keys: decide, send, log. Nothing is durable before the send."""
    crash_point(CrashPoint.BEFORE_PROPOSED)
    crash_point(CrashPoint.AFTER_PROPOSED)
    crash_point(CrashPoint.AFTER_DISPATCHED)
    key = baseline_key(args.case) if args.system == "idempotency_keys" else None
    result = post_refund(args, args.amount, key=key)
    crash_point(CrashPoint.AFTER_RESPONSE)
    event = "REFUNDED_REPLAYED" if result["replayed"] else "REFUNDED"
    log_line(args.log, event=event, amount_cents=args.amount, key=key, **result)
    emit("done", event=event, amount_cents=args.amount, **result)


def run_durable(args: argparse.Namespace) -> None:
    """Durable execution alone: the decision and the step's result are checkpointed."""
    checkpoint: dict[str, Any] = (
        json.loads(args.checkpoint.read_text()) if args.checkpoint.exists() else {}
    )
    if "decision" in checkpoint:
        log_line(args.log, event="DECISION_REPLAYED", **checkpoint["decision"])
    else:
        crash_point(CrashPoint.BEFORE_PROPOSED)
        checkpoint["decision"] = {"amount_cents": args.amount}  # the model, asked this once
        _save(args.checkpoint, checkpoint)
        crash_point(CrashPoint.AFTER_PROPOSED)
    amount = int(checkpoint["decision"]["amount_cents"])
    if "result" in checkpoint:
        result = checkpoint["result"]
        log_line(args.log, event="RESULT_REPLAYED", amount_cents=amount, **result)
        emit("done", event="RESULT_REPLAYED", amount_cents=amount, **result)
        return
    crash_point(CrashPoint.AFTER_DISPATCHED)  # no dispatch record: the moment before the request
    result = post_refund(args, amount, key=None)
    crash_point(CrashPoint.AFTER_RESPONSE)
    checkpoint["result"] = result
    _save(args.checkpoint, checkpoint)
    log_line(args.log, event="REFUNDED", amount_cents=amount, **result)
    emit("done", event="REFUNDED", amount_cents=amount, **result)


def _save(path: Path, checkpoint: Mapping[str, Any]) -> None:
    partial = path.with_suffix(".tmp")
    with partial.open("w") as out:
        json.dump(checkpoint, out)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)


# --- the gate --------------------------------------------------------------------------------


def build_gate(args: argparse.Namespace) -> tuple[Gate, str]:
    """The gate and the target's name, with premises rebuilt from a PROPOSED body at recovery."""
    journal: Journal
    if args.notary:
        from gate_client.notary_journal import NotaryJournal

        journal = NotaryJournal(args.notary, args.notary_token)
    else:
        journal = LocalJournal(args.journal)
    if args.stripe:
        from gate_client.adapters.stripe_refunds import StripeRefunds, refund_premises
        from testkit.agents import refund_agent
        from testkit.peers.localstripe import stripe_client

        client = stripe_client(args.stripe, timeout_seconds=TIMEOUT_SECONDS * 2)
        stripe_target = StripeRefunds(
            client, tier=Tier(args.tier), max_inflight=timedelta(seconds=TIMEOUT_SECONDS * 2)
        )
        payment_premises = refund_premises(client)

        def stripe_premises(proposed: Mapping[str, Any]) -> Sequence[Premise]:
            effect = gate_effect_id(
                proposed["case_id"], target=proposed["target"], tenant=proposed["tenant"]
            )
            payment = proposed["payload"]["payment_intent"]
            own = stripe_case_not_refunded(client, payment, effect)
            return [*payment_premises(proposed), own]

        gate = Gate(journal, {refund_agent.TARGET: stripe_target}, premises_for=stripe_premises)
        return gate, refund_agent.TARGET

    tier = Tier(args.tier)
    target: Target = HttpTarget(
        name=TARGET,
        base_url=args.service,
        tier=tier,
        queryable=tier == Tier.LOOKUP,
        key_window=KEY_WINDOW if tier == Tier.DEDUPES else None,
        max_inflight=timedelta(seconds=args.max_inflight),
        timeout_seconds=args.max_inflight,
        evidence_window=(timedelta(seconds=args.evidence_window) if args.evidence_window else None),
        attests_before_acting=args.attests_before_acting,
        money=REFUND_MONEY,
    )
    store = args.store

    def premises_for(proposed: Mapping[str, Any]) -> Sequence[Premise]:
        effect = gate_effect_id(
            proposed["case_id"], target=proposed["target"], tenant=proposed["tenant"]
        )
        return [case_not_refunded(store, proposed["payload"]["payment"], effect)]

    return Gate(journal, {TARGET: target}, premises_for=premises_for), TARGET


def run_gate(args: argparse.Namespace) -> None:
    gate, target = build_gate(args)
    if args.restarted:
        recover_until_settled(gate)
    payload: dict[str, Any] = (
        {"payment_intent": args.payment, "amount": args.amount}
        if args.stripe
        else {"payment": args.payment, "amount_cents": args.amount}
    )
    proposal = Proposal(args.case, target, ACTION, payload, args.lease, tenant=args.tenant)
    premises = gate.premises_for(proposal.proposed_body([]))
    proposal = Proposal(
        args.case, target, ACTION, payload, args.lease, premises=premises, tenant=args.tenant
    )
    emit_receipt("submit", gate.submit(proposal))


def recover_until_settled(gate: Gate, *, patience_seconds: float = 30.0) -> None:
    """The seed's worker: recover() until nothing is left in flight, then go on. An effect that
    waits out the notary's evidence window is asked about again every half second."""
    deadline = time.monotonic() + patience_seconds
    while True:
        receipts = gate.recover()
        for receipt in receipts:
            emit_receipt("recover", receipt)
        in_flight = [r for r in receipts if r.final_state in ("PROPOSED", "DISPATCHED")]
        if not in_flight or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def emit_receipt(step: str, receipt: Receipt) -> None:
    emit(step, receipt=receipt.to_dict())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("--case", required=True)
    parser.add_argument("--payment", required=True, help="the payment the refund refunds")
    parser.add_argument("--amount", type=int, required=True, help="cents, as the model decided")
    service = parser.add_mutually_exclusive_group(required=True)
    service.add_argument("--service", metavar="URL", help="the reference payment service")
    service.add_argument("--stripe", metavar="URL", help="a Stripe API (localstripe)")
    parser.add_argument("--store", type=Path, help="the reference service's store (premise)")
    parser.add_argument("--log", type=Path, help="the baselines' app log")
    parser.add_argument("--checkpoint", type=Path, help="durable_execution's checkpoint file")
    parser.add_argument("--journal", type=Path, help="the gate's local journal")
    parser.add_argument("--notary", metavar="URL", help="the gate's journal at this notary")
    parser.add_argument("--notary-token", help="the notary agent key")
    parser.add_argument("--tenant", default="", help="the notary tenant of the effect")
    parser.add_argument("--lease", default=LEASE_ID)
    parser.add_argument("--tier", type=int, choices=[t.value for t in Tier], default=1)
    parser.add_argument("--evidence-window", type=float, help="seconds; the notary holds evidence")
    parser.add_argument(
        "--attests-before-acting",
        action="store_true",
        help="the service attests each request to the notary before acting",
    )
    parser.add_argument(
        "--max-inflight",
        type=float,
        default=TIMEOUT_SECONDS,
        help="seconds: the request timeout, and so the declared max in-flight time",
    )
    parser.add_argument("--restarted", action="store_true", help="recover() before submitting")
    args = parser.parse_args(argv)
    needs = {
        "plain_retry": ["log"],
        "idempotency_keys": ["log"],
        "durable_execution": ["log", "checkpoint"],
        "gate": [] if args.notary else ["journal"],
    }[args.system]
    if args.system == "gate" and args.service:
        needs.append("store")
    missing = [f"--{name}" for name in needs if getattr(args, name) is None]
    if missing:
        parser.error(f"{args.system} needs {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.system == "gate":
        run_gate(args)
    elif args.system == "durable_execution":
        run_durable(args)
    else:
        run_baseline(args)


if __name__ == "__main__":
    main()
