"""Experiment approvals: a support queue's refunds approved case by case, against one standing
approval with a per-effect limit and a rolling budget, on the same simulated cases.

    python -m experiments.approvals [--cases 1000] [--agents 8] [--results-dir DIR]

Each arm is its own tenant of a live notary (gunicorn on a fresh PostgreSQL database,
EXPERIMENTS_DATABASE_URL) and its own payment service (the reference service, as its own
process: it does not dedupe and cannot be asked, so a lost answer is AMBIGUOUS and a second
request would be a second refund). The same cases run in both: refunds of mixed sizes, raced by
`--agents` agent processes (experiments/workers/approvals_agent.py, each with its own agent
key); a few answers lost on the way back; a shipping refund later on some cases; refunds made
by hand at the payment service around the gate. Then a person decides each AMBIGUOUS refund
by what the service's own record says, the held shipping refunds are submitted again, and
reconciliation lists the payment service's refunds against the ledger.

What is counted, from the notary's ledger and the service's own record: the approvals a person
made, the refunds over the standing limit (routed to a person, never dispatched under it), the
budget spent against its limit (overspend must be 0), refunds the budget refused, duplicates at
the service (must be 0), hand refunds reconciliation found (must be all), AMBIGUOUS refunds and
the new effects their holds stopped. Writes experiments/results/approvals.md and .json."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from experiments.kit.live_notary import LiveNotary, NotaryTenant, TargetSpec, live_notary
from experiments.kit.prose import dollars
from experiments.kit.results import RESULTS_DIR
from experiments.kit.tables import markdown_table
from experiments.workers.approvals_agent import MAX_INFLIGHT, REFUND_MONEY, TARGET
from gate_client.ids import effect_id_for
from gate_client.reconciliation import FindingKind
from testkit.paths import REPO_ROOT
from testkit.peers.reference_service import RunningServer, read_acts, running_server

SEED = 19
LIMIT_CENTS = 5000  # the standing approval's per-effect limit: $50.00
SHIPPING_CENTS = 599  # a shipping fee refunded later on some cases, under its own standing lease
SHIPPING_SHARE = 0.3
LOST_SHARE = 0.03  # answers lost on the way back from the payment service
HAND_REFUNDS = 25  # refunds support makes by hand at the payment service, around the gate
BUDGET_SHARE = 0.9  # the budget: this share of what the cases within the limit ask for
CASE_CLASS = "support-refunds"
AGENT_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class Case:
    case_id: str
    amount: int  # cents
    shipping: bool  # a shipping refund follows later
    lost: bool  # the payment service's answer to its refund is lost


def simulated_cases(count: int, rng: random.Random) -> list[Case]:
    """Refunds as a support queue sees them: most small, some over the limit, a few large."""
    cases = []
    for n in range(count):
        draw = rng.random()
        if draw < 0.85:
            amount = rng.randint(500, LIMIT_CENTS)
        elif draw < 0.97:
            amount = rng.randint(LIMIT_CENTS + 1, 20000)
        else:
            amount = rng.randint(20001, 90000)
        cases.append(
            Case(f"RF-{n:05d}", amount, rng.random() < SHIPPING_SHARE, rng.random() < LOST_SHARE)
        )
    return cases


@dataclass
class Arm:
    name: str
    approvals: int = 0  # each a person's decision: a lease granted for a case, or standing
    over_limit: int = 0  # refunds above the standing limit
    over_limit_dispatched_standing: int = 0
    budget_cents: int | None = None
    budget_spent_cents: int = 0
    refused_by_budget: int = 0
    states: Counter[str] = field(default_factory=Counter)
    ambiguous: int = 0
    held: int = 0
    held_then_sent: int = 0
    duplicates: int = 0
    refunds_at_service: int = 0
    hand_refunds: int = 0
    hand_refunds_found: int = 0
    findings: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    cases = simulated_cases(args.cases, random.Random(SEED))
    with tempfile.TemporaryDirectory(prefix="approvals-") as work:
        arms = compare(cases, agents=args.agents, work=Path(work))
    write(arms, cases, args)


def compare(
    cases: Sequence[Case], *, agents: int, work: Path, database_url: str | None = None
) -> list[Arm]:
    """Both arms on the same cases, each its own tenant of one live notary (on `database_url`,
    else a fresh database of its own): (per_case, standing)."""
    with live_notary(work, database_url=database_url) as notary:
        return [
            run_arm(notary, work, name, cases, agents=agents) for name in ("per_case", "standing")
        ]


def run_arm(
    notary: LiveNotary, work: Path, name: str, cases: Sequence[Case], *, agents: int
) -> Arm:
    from django.utils import timezone

    from notary import services

    started = time.perf_counter()
    arm = Arm(name)
    shop = notary.tenant(
        f"shop-{name.replace('_', '-')}",
        targets=[TargetSpec(TARGET, tier=3, max_inflight=MAX_INFLIGHT, money=REFUND_MONEY)],
    )
    tokens = [
        services.api_key_issue(tenant=shop.tenant, role="agent", holder="agent")[1]
        for _ in range(agents)
    ]
    standing: dict[str, str] = {}
    if name == "standing":
        within = sum(c.amount for c in cases if c.amount <= LIMIT_CENTS)
        arm.budget_cents = int(within * BUDGET_SHARE) // 10000 * 10000
        budget = {"per": "tenant", "window_seconds": 86400, "max_amount": arm.budget_cents}
        standing["refund"] = _standing_lease(shop, "refund", LIMIT_CENTS, budgets=[budget])
        standing["refund_shipping"] = _standing_lease(
            shop, "refund_shipping", SHIPPING_CENTS, budgets=[]
        )
        arm.approvals += 2
    with running_server(work / f"{name}-service.jsonl", dedupe=False, lookup=False) as service:
        since = timezone.now()
        refunds = [_approved(arm, shop, standing, c, "refund", c.amount) for c in cases]
        for case in cases:
            if case.lost:
                service.drop_next_response(_effect_id(shop, case.case_id, "refund"))
        hand = _refund_by_hand(service, cases)
        first = _run_agents(shop, service, tokens, refunds, work / name)
        followups = [
            _approved(arm, shop, standing, c, "refund_shipping", SHIPPING_CENTS)
            for c in cases
            if c.shipping
        ]
        second = _run_agents(shop, service, tokens, followups, work / f"{name}-shipping")
        held = {r["case_id"] for r in second if r["final_state"] == "HELD"}
        ambiguous = _decide_ambiguous(shop, service, first)
        again = [j for j in followups if j["case_id"] in held]
        third = _run_agents(shop, service, tokens, again, work / f"{name}-after")
        arm.over_limit = sum(c.amount > LIMIT_CENTS for c in cases)
        arm.ambiguous, arm.held = ambiguous, len(held)
        arm.held_then_sent = sum(1 for r in third if r["final_state"] == "COMMITTED")
        _count(arm, shop, service, [*first, *second, *third], standing.get("refund"))
        arm.hand_refunds = len(hand)
        arm.findings, arm.hand_refunds_found = _reconcile(shop, service, since, hand)
    arm.seconds = time.perf_counter() - started
    return arm


def _approved(
    arm: Arm,
    shop: NotaryTenant,
    standing: dict[str, str],
    case: Case,
    action: str,
    amount: int,
) -> dict[str, Any]:
    """The agent's job for this refund, under the standing lease for `action` when there is
    one and it covers the amount; else a person approves this one refund first."""
    lease_id = standing.get(action)
    if lease_id is not None and amount <= (LIMIT_CENTS if action == "refund" else SHIPPING_CENTS):
        return _job(case, action, amount, lease_id, CASE_CLASS)
    arm.approvals += 1
    return _job(case, action, amount, _case_lease(shop, case.case_id, action, amount), None)


def _decide_ambiguous(
    shop: NotaryTenant, service: RunningServer, results: Sequence[dict[str, Any]]
) -> int:
    """A person decides each AMBIGUOUS refund by the payment service's own record; how many."""
    from notary import services

    ambiguous = [r for r in results if r["final_state"] == "AMBIGUOUS"]
    for result in ambiguous:
        services.effect_resolve(
            tenant=shop.tenant,
            effect_id=result["effect_id"],
            happened=bool(service.acts(result["effect_id"])),
            by="gil",
            reason="checked the payment service's refund list",
        )
    return len(ambiguous)


def _count(
    arm: Arm,
    shop: NotaryTenant,
    service: RunningServer,
    results: Sequence[dict[str, Any]],
    standing: str | None,
) -> None:
    """Final states (the last answer per effect), duplicates at the service, the budget."""
    from notary.models import Effect

    arm.states = Counter(Effect.objects.filter(tenant=shop.tenant).values_list("state", flat=True))
    # A budget's refusal is final: the agents' answers say which effects it stopped.
    arm.refused_by_budget = sum(1 for r in results if r["final_state"] == "REFUSED:lease_budget")
    acts = read_acts(service.store)
    arm.refunds_at_service = len(acts)
    per_effect = Counter(a["effect_id"] for a in acts)
    arm.duplicates = sum(n - 1 for n in per_effect.values() if n > 1)
    if standing is not None:
        arm.budget_spent_cents, arm.over_limit_dispatched_standing = _standing_spent(shop, standing)


def _standing_lease(
    shop: NotaryTenant, action: str, limit: int, *, budgets: list[dict[str, Any]]
) -> str:
    """One approval for every case of the class: each effect at most `limit`, within `budgets`."""
    return _lease(shop, action, limit, timedelta(days=7), case_class=CASE_CLASS, budgets=budgets)


def _case_lease(shop: NotaryTenant, case_id: str, action: str, amount: int) -> str:
    """A person approves this one refund: a lease for the case, at most its amount."""
    return _lease(shop, action, amount, timedelta(days=1), case_id=case_id)


def _lease(shop: NotaryTenant, action: str, limit: int, lasting: timedelta, **scope: Any) -> str:
    from django.utils import timezone

    from notary import services

    return services.lease_grant(
        tenant=shop.tenant,
        approver=shop.approver,
        action=action,
        expires_at=timezone.now() + lasting,
        requested_by="agent",
        limits={"amount_cents": limit},
        currency="USD",
        **scope,
    ).lease_id


def _job(
    case: Case, action: str, amount: int, lease_id: str, case_class: str | None
) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "case_class": case_class,
        "action": action,
        "amount": amount,
        "lease_id": lease_id,
    }


def _effect_id(shop: NotaryTenant, case_id: str, action: str) -> str:
    return effect_id_for(case_id, TARGET, action, tenant=shop.slug)


def _refund_by_hand(service: RunningServer, cases: Sequence[Case]) -> list[str]:
    """Support refunds some customers by hand at the payment service, naming no effect."""
    refs = []
    for n, case in enumerate(cases[:: max(1, len(cases) // HAND_REFUNDS)][:HAND_REFUNDS]):
        answer = httpx.post(
            f"{service.url}/effects",
            json={
                "effect_id": f"hand-{n:03d}",
                "payload": {"payment": f"pay_{case.case_id}", "amount_cents": 1500},
            },
            timeout=10,
        )
        answer.raise_for_status()
        refs.append(answer.json()["result_ref"])
    return refs


def _run_agents(
    shop: NotaryTenant,
    service: RunningServer,
    tokens: Sequence[str],
    jobs: Sequence[dict[str, Any]],
    directory: Path,
) -> list[dict[str, Any]]:
    """The jobs dealt round-robin to one agent process per token, all started at once."""
    directory.mkdir(parents=True, exist_ok=True)
    children = []
    for n, token in enumerate(tokens):
        spec = {
            "notary": shop.url,
            "token": token,
            "tenant": shop.slug,
            "service": service.url,
            "jobs": list(jobs[n :: len(tokens)]),
        }
        path = directory / f"agent-{n}.json"
        path.write_text(json.dumps(spec))
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "experiments.workers.approvals_agent", str(path)],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for child in children:
        out, err = child.communicate(timeout=AGENT_TIMEOUT_SECONDS)
        if child.returncode != 0:
            raise SystemExit(f"an agent failed ({child.returncode}): {err[-2000:]}")
        results += [json.loads(line) for line in out.splitlines() if line.strip()]
    if len(results) != len(jobs):
        raise SystemExit(f"{len(jobs)} jobs, {len(results)} answers")
    return results


def _standing_spent(shop: NotaryTenant, lease_id: str) -> tuple[int, int]:
    """What the standing lease's dispatches spent, by their DISPATCHED statements, and how many
    of them were over its limit."""
    from gate_client.budgets import statement_of
    from ledger.core.entries import EntryKind
    from ledger.selectors import iter_entries

    spent = over = 0
    for entry in iter_entries(log=shop.tenant.log):
        if entry.kind == EntryKind.DISPATCHED and entry.body_value()["lease_id"] == lease_id:
            statement = statement_of([entry])
            if statement is not None:
                spent += statement.amount
                over += statement.amount > LIMIT_CENTS
    return spent, over


def _reconcile(
    shop: NotaryTenant, service: RunningServer, since: datetime, hand: Sequence[str]
) -> tuple[Counter[str], int]:
    """Reconcile the payment service's refunds since the arm began: the findings by kind, and
    how many of the hand refunds were found as done around the gate."""
    from django.utils import timezone

    from notary.reconciliation import reconciliation_source_set, target_reconcile

    target = shop.targets[TARGET]
    reconciliation_source_set(target=target, provider="reference", base_url=service.url)
    done = target_reconcile(tenant=shop.tenant, target=target, since=since, until=timezone.now())
    kinds = Counter(str(f.kind) for f in done.findings)
    found = {f.subject for f in done.findings if f.kind == FindingKind.NOT_ADMITTED}
    return kinds, sum(1 for ref in hand if ref in found)


def write(arms: Sequence[Arm], cases: Sequence[Case], args: argparse.Namespace) -> None:
    per_case, standing = arms
    budget = standing.budget_cents or 0
    overspend = max(0, standing.budget_spent_cents - budget)
    rows = [
        ["approvals a person made", str(per_case.approvals), str(standing.approvals)],
        [
            f"refunds over the {dollars(LIMIT_CENTS)} standing limit",
            f"{per_case.over_limit} (each approved on its own)",
            f"{standing.over_limit} (each approved on its own; "
            f"{standing.over_limit_dispatched_standing} dispatched under the standing approval)",
        ],
        [
            "budget (24 h, all agent keys)",
            "-",
            f"{dollars(standing.budget_spent_cents)} spent of {dollars(budget)}; "
            f"overspend {dollars(overspend)}",
        ],
        [
            "refunds the budget refused",
            str(per_case.refused_by_budget),
            str(standing.refused_by_budget),
        ],
        [
            "duplicates at the payment service",
            str(per_case.duplicates),
            str(standing.duplicates),
        ],
        [
            "hand refunds found by reconciliation",
            f"{per_case.hand_refunds_found}/{per_case.hand_refunds}",
            f"{standing.hand_refunds_found}/{standing.hand_refunds}",
        ],
        ["AMBIGUOUS refunds (answer lost)", str(per_case.ambiguous), str(standing.ambiguous)],
        [
            "new effects their holds stopped (sent after the decision)",
            f"{per_case.held} ({per_case.held_then_sent})",
            f"{standing.held} ({standing.held_then_sent})",
        ],
        [
            "refunds at the payment service (agents + by hand)",
            str(per_case.refunds_at_service),
            str(standing.refunds_at_service),
        ],
        ["wall time", f"{per_case.seconds:.0f} s", f"{standing.seconds:.0f} s"],
    ]
    table = markdown_table(["", "approved per case", "standing approval with budget"], rows)
    states = markdown_table(
        ["final state", "approved per case", "standing approval with budget"],
        [
            [state, str(per_case.states[state]), str(standing.states[state])]
            for state in sorted(per_case.states.keys() | standing.states.keys())
        ],
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = f"python -m experiments.approvals --cases {args.cases} --agents {args.agents}"
    text = "\n\n".join(
        [
            "# Experiment approvals: per-case approval against a standing approval with a budget",
            f"Generated {generated} by `{command}`.",
            (__doc__ or "").split("\n\n")[2],
            f"{len(cases)} cases: {sum(c.amount <= LIMIT_CENTS for c in cases)} refunds of at "
            f"most {dollars(LIMIT_CENTS)}, {sum(c.amount > LIMIT_CENTS for c in cases)} over it; "
            f"{sum(c.shipping for c in cases)} shipping refunds of {dollars(SHIPPING_CENTS)}; "
            f"{sum(c.lost for c in cases)} answers lost; {HAND_REFUNDS} refunds by hand; "
            f"{args.agents} agent processes racing.",
            "## Results",
            table,
            "## Final states",
            states,
        ]
    )
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "approvals.md").write_text(text + "\n")
    document = {
        "command": command,
        "generated": generated,
        # Counters as plain objects (dataclasses.asdict would rebuild them from their pairs).
        "arms": [{f.name: _plain(getattr(a, f.name)) for f in fields(a)} for a in arms],
    }
    (args.results_dir / "approvals.json").write_text(json.dumps(document, indent=1) + "\n")
    print(table)


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Counter) else value


if __name__ == "__main__":
    main()
