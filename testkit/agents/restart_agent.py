"""Child processes for the PostgreSQL restart test.

    python -m testkit.agents.restart_agent setup --agents N --cases M
    python -m testkit.agents.restart_agent dump --tenant SLUG
    python -m testkit.agents.restart_agent agent --index I --notary URL --token TOKEN --tenant SLUG
        --refunds-url URL --notes-url URL --leases FILE --stop-file FILE

`setup` and `dump` are Django processes (DJANGO_SETTINGS_MODULE and DATABASE_URL from the
environment): `setup` creates the tenant, its two targets, an approver key, one agent key per
agent and a lease per case, and prints them as JSON; `dump` prints the tenant's whole ledger as
``{"origin", "leaves": [base64 leaf bytes, in seq order]}``.

`agent` has no Django: it is an agent with a Gate whose journal is the notary (NotaryJournal),
submitting one refund per case, alternating between a target that dedupes on a key (tier 1,
"refunds") and one that can only be looked up (tier 2, "notes"), until STOP_FILE exists or its
cases run out. A submit the notary cannot record raises JournalError: the gate failed closed,
and the agent notes the effect and goes on. It then prints ``stopped`` and waits for a line on
stdin; on it, it runs ``recover()`` and submits again every effect that failed closed (a submit
is idempotent on the effect id), retrying while the notary still fails, and prints one JSON
line: ``{"effects", "failed_closed", "unexpected", "recover_rounds"}``."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.journal import JournalError
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.targets import Tier

ACTION = "refund"
TARGETS = ("refunds", "notes")  # tier 1 (dedupes, can be looked up), tier 2 (looked up only)
# A request's own bound is its connect and its read, REQUEST_TIMEOUT each; the window declared
# covers that with room for a late start on a loaded machine (protocol.late_request refuses a
# start after the window, not one just inside it).
REQUEST_TIMEOUT = timedelta(seconds=2)
MAX_INFLIGHT = timedelta(seconds=10)
PACE_SECONDS = 0.15  # between two submits of one agent
RETRY_SECONDS = 0.4  # after a submit that failed closed
RECOVER_ROUNDS = 30


def case_id(agent: int, n: int) -> str:
    return f"a{agent}-c{n}"


def target_for(n: int) -> str:
    return TARGETS[n % 2]


# --- Django processes ------------------------------------------------------------------------


def setup(agents: int, cases: int) -> None:
    from django.utils import timezone

    from notary import services

    tenant = services.tenant_create(slug="restart", name="PostgreSQL restart")
    services.target_register(
        tenant=tenant,
        name="refunds",
        tier=1,
        queryable=True,
        max_inflight=MAX_INFLIGHT,
        key_window=timedelta(hours=24),
    )
    services.target_register(
        tenant=tenant, name="notes", tier=2, queryable=True, max_inflight=MAX_INFLIGHT
    )
    approver, _ = services.api_key_issue(tenant=tenant, role="approver", holder="finance")
    tokens = [
        services.api_key_issue(tenant=tenant, role="agent", holder=f"agent-{a}")[1]
        for a in range(agents)
    ]
    expires = timezone.now() + timedelta(hours=2)
    leases = [
        [
            services.lease_grant(
                tenant=tenant,
                approver=approver,
                case_id=case_id(a, n),
                action=ACTION,
                expires_at=expires,
                requested_by=f"agent-{a}",
            ).lease_id
            for n in range(cases)
        ]
        for a in range(agents)
    ]
    print(json.dumps({"tenant": tenant.slug, "tokens": tokens, "leases": leases}))


def dump(slug: str) -> None:
    from ledger.selectors import iter_entries
    from notary.models import Tenant

    log = Tenant.objects.get(slug=slug).log
    leaves = [base64.b64encode(e.leaf_bytes()).decode() for e in iter_entries(log=log)]
    print(json.dumps({"origin": log.origin, "leaves": leaves}))


# --- the agent -------------------------------------------------------------------------------


def case_open() -> PremiseResult:
    return PremiseResult(True, {"case": "open"})


PREMISES = [Premise("case_open", case_open)]


def build_gate(args: argparse.Namespace) -> Gate:
    timeout = REQUEST_TIMEOUT.total_seconds()
    targets = {
        "refunds": HttpTarget(
            name="refunds",
            base_url=args.refunds_url,
            tier=Tier.DEDUPES,
            queryable=True,
            key_window=timedelta(hours=24),
            max_inflight=MAX_INFLIGHT,
            timeout_seconds=timeout,
        ),
        "notes": HttpTarget(
            name="notes",
            base_url=args.notes_url,
            tier=Tier.LOOKUP,
            queryable=True,
            key_window=None,
            max_inflight=MAX_INFLIGHT,
            timeout_seconds=timeout,
        ),
    }
    journal = NotaryJournal(args.notary, args.token, timeout=5.0)
    return Gate(journal, targets, premises_for=lambda proposed: PREMISES)


def proposal(args: argparse.Namespace, n: int, lease_id: str) -> Proposal:
    return Proposal(
        case_id=case_id(args.index, n),
        target=target_for(n),
        action=ACTION,
        payload={"case": case_id(args.index, n), "amount_cents": 100 + n},
        lease_id=lease_id,
        premises=PREMISES,
        tenant=args.tenant,
    )


def run_agent(args: argparse.Namespace) -> None:
    leases: list[str] = json.loads(Path(args.leases).read_text())
    gate = build_gate(args)
    submitted: list[Proposal] = []
    failed_closed: dict[str, Proposal] = {}
    unexpected: list[str] = []
    for n, lease_id in enumerate(leases):
        if Path(args.stop_file).exists():
            break
        planned = proposal(args, n, lease_id)
        submitted.append(planned)
        try:
            gate.submit(planned)
        except JournalError:
            failed_closed[planned.effect_id] = planned
            time.sleep(RETRY_SECONDS)
        except Exception:
            unexpected.append(f"submit {planned.effect_id}: {traceback.format_exc()}")
        time.sleep(PACE_SECONDS)

    print("stopped", flush=True)
    sys.stdin.readline()
    rounds = 0
    pending = dict(failed_closed)
    while rounds < RECOVER_ROUNDS:
        rounds += 1
        try:
            gate.recover()
            for effect_id, planned in list(pending.items()):
                gate.submit(planned)
                del pending[effect_id]
            break
        except JournalError:
            time.sleep(0.5)  # the notary is still reconnecting: recovery is safe to repeat
        except Exception:
            unexpected.append(f"recover: {traceback.format_exc()}")
            break
    report: dict[str, Any] = {
        "effects": [p.effect_id for p in submitted],
        "failed_closed": sorted(failed_closed),
        "unexpected": unexpected,
        "recover_rounds": rounds,
        "left_pending": sorted(pending),
    }
    print(json.dumps(report), flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = parser.add_subparsers(dest="role", required=True)
    made = roles.add_parser("setup")
    made.add_argument("--agents", type=int, required=True)
    made.add_argument("--cases", type=int, required=True)
    dumped = roles.add_parser("dump")
    dumped.add_argument("--tenant", required=True)
    agent = roles.add_parser("agent")
    agent.add_argument("--index", type=int, required=True)
    agent.add_argument("--notary", required=True)
    agent.add_argument("--token", required=True)
    agent.add_argument("--tenant", required=True)
    agent.add_argument("--refunds-url", required=True)
    agent.add_argument("--notes-url", required=True)
    agent.add_argument("--leases", required=True, help="JSON list of this agent's lease ids")
    agent.add_argument("--stop-file", required=True)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.role == "agent":
        run_agent(args)
        return
    import django

    django.setup()
    if args.role == "setup":
        setup(args.agents, args.cases)
    else:
        dump(args.tenant)


if __name__ == "__main__":
    main(sys.argv[1:])
