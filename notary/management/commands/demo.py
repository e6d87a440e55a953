"""`make demo`: one refund through a running notary, with a crash in the middle.

The notary is served from this process (Django's threaded WSGI server on a free port, on the
embedded SQLite database); the payment service is the reference service of testkit; two
witnesses (`python -m witness`, keys and state under var/witnesses/) cosign every checkpoint;
the agent is a separate process, run twice: first it is SIGKILLed after the payment service
refunded and before the outcome was recorded, then a fresh process recovers. Everything the
agent knows comes over HTTP; everything printed at the end is checked with the log's public key
and the witnesses' keys alone."""

from __future__ import annotations

import argparse
import base64
import io
import json
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import svix.webhooks
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.servers.basehttp import (
    ThreadedWSGIServer,
    WSGIRequestHandler,
    get_internal_wsgi_application,
)
from django.test import override_settings
from django.utils import timezone

from gate_client.faults import CrashPoint
from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.money import MoneyDeclaration
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt, derive_receipt
from gate_client.targets import Tier
from ledger import selectors as ledger_selectors
from ledger import services as ledger_services
from ledger.core.checkpoint import Checkpoint as CheckpointText
from ledger.core.checkpoint import log_verifier, parse_tlog_proof
from ledger.core.cosignature import WitnessPolicy, parse_cosigner_skey
from ledger.core.entries import entry_from_leaf, format_timestamp
from ledger.core.note import Signer, parse_vkey
from ledger.keys import load_signing_key, write_signing_key
from ledger.selectors import log_verifiers
from notary import selectors, services
from notary.errors import NotaryInputError
from notary.models import Tenant
from testkit.peers.reference_service import read_acts, running_server
from testkit.processes import armed_env
from testkit.witness_process import RunningWitness, spawn_witness, witness_keygen
from webhooks import services as webhook_services

DEMO_DOMAIN = "demo.interlock.example"
TARGET = "payments"
# The demo's two effects: (target, tier, key window, the notary's evidence window).
EFFECTS: dict[str, tuple[str, Tier, timedelta | None, timedelta | None]] = {
    "refund": (TARGET, Tier.DEDUPES, timedelta(hours=24), None),
    "email": ("email", Tier.NEITHER, None, timedelta(hours=24)),
    "sms": ("sms", Tier.NEITHER, None, None),  # nothing to ask, no webhooks: a person decides
}
MAX_INFLIGHT = timedelta(seconds=2)
# The refund's money is its payload's amount_cents, as the payments target declares it.
REFUND_MONEY = MoneyDeclaration(amount_field="amount_cents", currency_field="currency")
WITNESS_DIR = settings.VAR_DIR / "witnesses"
DEMO_REVIEWER, DEMO_EMAIL = "demo-reviewer", "reviewer@shop.example"


class Command(BaseCommand):
    help = (
        "Walk one agent refund through a running notary: a lease granted, the refund proposed "
        "and dispatched, the agent killed before it records the outcome, recovery, and the "
        "receipt with its proofs checked against the log's public key; then a tier-3 email, "
        "its agent killed after the send, settled by the email service's webhook."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", choices=["submit", "recover"], help=argparse.SUPPRESS)
        parser.add_argument("--notary", help=argparse.SUPPRESS)
        parser.add_argument("--token", help=argparse.SUPPRESS)
        parser.add_argument("--service", help=argparse.SUPPRESS)
        parser.add_argument("--tenant", help=argparse.SUPPRESS)
        parser.add_argument("--lease", help=argparse.SUPPRESS)
        parser.add_argument("--effect", choices=list(EFFECTS), help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["agent"]:
            self._be_the_agent(options)
            return
        key_file = settings.NOTARY_SIGNING_KEY_FILE
        if not key_file.exists():
            write_signing_key(path=key_file, name=DEMO_DOMAIN)
            self._say(f"Created the notary signing key at {key_file}.")
        with (
            tempfile.TemporaryDirectory() as scratch,
            running_server(Path(scratch) / "refunds", dedupe=True, lookup=True) as payments,
            running_server(Path(scratch) / "emails", dedupe=False, lookup=False) as emails,
            _witnesses(load_signing_key()) as witnesses,
            override_settings(
                LEDGER_WITNESSES=[(w.url, w.vkey) for w in witnesses],
                LEDGER_COSIGNATURE_QUORUM=len(witnesses),
            ),
            _serving_notary() as notary_url,
        ):
            login = self._reviewer()
            tenant, tokens = self._walk_through(notary_url, payments.url, Path(payments.store))
            self._settle_by_webhook(notary_url, tenant, tokens, emails.url, Path(emails.store))
            self._decided_by_a_person(notary_url, tenant, tokens, emails.url, Path(emails.store))
            self._say("9. Full verification of the tenant's log (chain, tree, checkpoints):")
            call_command(
                "verify_ledger", log=tenant.log.origin, no_progress=True, stdout=self.stdout
            )
            verify = self._audit(tenant, witnesses)
            self._split_view(tenant, witnesses[0])
        self._next_steps(verify, login)

    def _reviewer(self) -> str:
        """The demo's finance reviewer, created on the first run: how to log in as them."""
        password = secrets.token_urlsafe(12)
        try:
            services.reviewer_create(username=DEMO_REVIEWER, email=DEMO_EMAIL, password=password)
        except NotaryInputError:
            return f"{DEMO_REVIEWER} (created by an earlier run; `manage.py changepassword`)"
        return f"{DEMO_REVIEWER} / {password} (a finance reviewer, created now)"

    def _decided_by_a_person(
        self,
        notary_url: str,
        tenant: Tenant,
        tokens: tuple[str, str],
        service_url: str,
        store: Path,
    ) -> None:
        """Tier 3 with nothing to ask: a text message service with no key, no lookup and no
        webhooks. The agent is killed after the send; recovery cannot know, so the effect is
        AMBIGUOUS and waits in the review queue until a person decides."""
        agent_token, approver_token = tokens
        services.target_register(
            tenant=tenant, name="sms", tier=3, queryable=False, max_inflight=MAX_INFLIGHT
        )
        lease_id = _grant(notary_url, approver_token, "sms")["lease_id"]
        agent_args, effect_id = _killed_after_acting(
            notary_url, agent_token, service_url, tenant.slug, lease_id, "sms"
        )
        recovered = _run_agent("recover", agent_args)
        states = [json.loads(line)["final_state"] for line in recovered.stdout.splitlines()]
        queue = selectors.review_queue_size(tenant=tenant)
        resolved = services.effect_resolve(
            tenant=tenant,
            effect_id=effect_id,
            happened=True,
            reason="the customer replied to the text message",
            by=DEMO_REVIEWER,
        )
        receipt = _served_receipt(notary_url, agent_token, effect_id)["receipt"]
        self._say(
            "8. A text message through a tier-3 service with nothing to ask (no key, no lookup, "
            "no webhooks); the agent is killed after the send. The restarted agent's recovery: "
            f"{', '.join(states)} — it cannot know, and does not guess. The review queue holds "
            f'{queue} effect; {DEMO_REVIEWER} decides it happened ("the customer replied"), '
            f"recorded at ledger seq {resolved.seq}: {receipt['final_state']}. Texts sent: "
            f"{len(read_acts(store, effect_id))}."
        )

    def _next_steps(self, verify: list[str], login: str) -> None:
        """Where to look next: the admin with a reviewer's login, the export, the API."""
        command = shlex.join([".venv/bin/python", *map(_from_base_dir, verify[1:])])
        self._say("What next:")
        self.stdout.write(
            "- The admin: `.venv/bin/python manage.py runserver`, then "
            f"http://127.0.0.1:8000/admin/ as {login}: the effects, their ledger entries and "
            "the review queue.\n"
            f"- The export again, offline: {command}\n"
            "- The API: http://127.0.0.1:8000/v1/docs/ (Swagger UI), with a key from "
            "`manage.py issue_api_key --tenant SLUG --role agent --holder NAME`.\n"
            '- README.md: "The gate in an agent", "Witnesses", "Finance review and auditor '
            'exports".'
        )

    def _split_view(self, tenant: Tenant, witness: RunningWitness) -> None:
        """What a witness is for: the notary's own key signs another tree of the size the
        witness cosigned last (a history rewritten by an insider who holds the key), and the
        witness refuses to cosign it, keeping both checkpoints as evidence."""
        signed = ledger_selectors.latest_checkpoint(log=tenant.log)
        if signed is None:
            raise CommandError("the tenant's log has no checkpoint to contradict")
        forged = CheckpointText(tenant.log.origin, signed.size, secrets.token_bytes(32))
        answer = witness.add_checkpoint(
            old=signed.size, proof=[], note=forged.sign(load_signing_key())
        )
        if answer.status != 422:
            raise CommandError(f"the witness did not refuse the forged tree: {answer.text}")
        self._say(
            f"11. A split view tried: the notary's own key signs another tree of size "
            f"{signed.size}. Witness {witness.vkey.split('+')[0]} answers {answer.status}: "
            f"{answer.text.splitlines()[0]}. Both checkpoints are kept as evidence in "
            f"{WITNESS_DIR / 'w1.state.evidence.jsonl'}; an agent or auditor that requires "
            "the witnesses' cosignatures never accepts the forged tree."
        )

    def _audit(self, tenant: Tenant, witnesses: list[RunningWitness]) -> list[str]:
        """An auditor's export of every receipt, checked by the offline verifier with the
        notary's published key, in a process that has neither Django nor a network."""
        ledger_services.sign_checkpoint(log=tenant.log, signer=load_signing_key())
        export = settings.VAR_DIR / f"receipts-{tenant.slug}.jsonl"
        call_command(
            "export_receipts",
            tenant=tenant.slug,
            out=export,
            no_progress=True,
            stdout=io.StringIO(),
        )
        # The log's keys, as GET /v1/logs/<origin>/vkey publishes them (named after its origin),
        # and the witnesses' own keys, whose cosignatures the checkpoint must carry.
        vkeys = [arg for key in log_verifiers(log=tenant.log) for arg in ("--vkey", key.vkey)]
        vkeys += [arg for witness in witnesses for arg in ("--witness", witness.vkey)]
        command = [sys.executable, "-m", "gate_client.verify", str(export), *vkeys]
        verified = subprocess.run(command, capture_output=True, text=True, timeout=120)
        self._say(f"10. The auditor's export, {export.name}, checked offline with the keys alone:")
        self.stdout.write(verified.stdout.rstrip())
        if verified.returncode != 0:
            raise CommandError(f"the export did not verify: {verified.stderr}")
        return command

    def _walk_through(
        self, notary_url: str, service_url: str, store: Path
    ) -> tuple[Tenant, tuple[str, str]]:
        """The refund; returns the tenant, and its agent's and approver's tokens."""
        slug = f"shop-{secrets.token_hex(3)}"
        tenant = services.tenant_create(slug=slug, name="A shop")
        witnesses = settings.LEDGER_WITNESSES
        services.target_register(
            tenant=tenant,
            name=TARGET,
            tier=1,
            queryable=True,
            max_inflight=MAX_INFLIGHT,
            key_window=EFFECTS["refund"][2],
            money=REFUND_MONEY.body(),
        )
        _, agent_token = services.api_key_issue(tenant=tenant, role="agent", holder="refund-bot")
        _, approver_token = services.api_key_issue(
            tenant=tenant, role="approver", holder="maria@shop.example"
        )
        self._say(
            f"1. The notary is serving {notary_url}; tenant {slug!r}, log {tenant.log.origin}"
        )
        self._say(
            f"   Witnesses {', '.join(url for url, _ in witnesses)} cosign each checkpoint the "
            f"notary signs; the notary publishes only checkpoints all {len(witnesses)} cosigned "
            "(LEDGER_COSIGNATURE_QUORUM)."
        )

        lease = _grant(notary_url, approver_token, "refund", limits={"amount_cents": 2000})
        self._say(
            f"2. {lease['granted_by']} grants lease {lease['lease_id']}: refund on case_4711, "
            f"at most 2000 cents (ledger seq {lease['granted_seq']})"
        )

        agent_args, effect_id = _killed_after_acting(
            notary_url, agent_token, service_url, slug, lease["lease_id"], "refund"
        )
        shown = httpx.get(
            f"{notary_url}/v1/effects/{effect_id}",
            headers={"Authorization": f"Bearer {agent_token}"},
        ).json()
        refunds = read_acts(store, effect_id)
        self._say(
            "3. The agent proposed the refund, the notary checked the lease and recorded "
            "DISPATCHED, the payment service refunded — and the agent was SIGKILLed before "
            f"it read the answer. The notary says: {shown['effect']['state']}; the payment "
            f"service's own records: {len(refunds)} refund."
        )

        recovered = _run_agent("recover", agent_args)
        if recovered.returncode != 0:
            raise CommandError(f"recovery failed: {recovered.stderr}")
        receipt = json.loads(recovered.stdout.splitlines()[-1])
        self._say(
            f"4. A new agent process runs recover(): tier 1, so it re-checks the lease and the "
            f"premise and resends under the same idempotency key. Final state: "
            f"{receipt['final_state']}; refunds at the payment service: "
            f"{len(read_acts(store, effect_id))}."
        )

        ledger_services.sign_checkpoint(log=tenant.log, signer=load_signing_key())
        proved = _served_receipt(notary_url, agent_token, effect_id)
        self._say("5. The receipt, as the notary serves it:")
        self.stdout.write(json.dumps(proved["receipt"], indent=2))
        self._verify_offline(notary_url, tenant.log.origin, effect_id, proved)
        return tenant, (agent_token, approver_token)

    def _settle_by_webhook(
        self,
        notary_url: str,
        tenant: Tenant,
        tokens: tuple[str, str],
        service_url: str,
        store: Path,
    ) -> None:
        """Tier 3: an email service with no key and no lookup, whose delivery webhooks reach
        the notary. A crash after the send would be AMBIGUOUS; the webhook settles it."""
        agent_token, approver_token = tokens
        target = services.target_register(
            tenant=tenant,
            name="email",
            tier=3,
            queryable=False,
            max_inflight=MAX_INFLIGHT,
            evidence_window=EFFECTS["email"][3],
        )
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        endpoint = webhook_services.endpoint_create(
            tenant=tenant, target=target, provider="resend", secrets=[secret]
        )
        lease_id = _grant(notary_url, approver_token, "email")["lease_id"]
        agent_args, effect_id = _killed_after_acting(
            notary_url, agent_token, service_url, tenant.slug, lease_id, "email"
        )

        event = {
            "type": "email.sent",
            "created_at": format_timestamp(timezone.now()),
            "data": {
                "email_id": f"em_{secrets.token_hex(8)}",
                "tags": {"interlock_effect_id": effect_id},
            },
        }
        body = json.dumps(event)
        message_id = f"msg_{secrets.token_hex(8)}"
        sent_at = timezone.now()
        delivered = httpx.post(
            f"{notary_url}/webhooks/{endpoint.public_id}/",
            content=body.encode(),
            headers={
                "Content-Type": "application/json",
                "svix-id": message_id,
                "svix-timestamp": str(int(sent_at.timestamp())),
                "svix-signature": svix.webhooks.Webhook(secret).sign(message_id, sent_at, body),
            },
        )
        delivered.raise_for_status()
        recovered = _run_agent("recover", agent_args)
        receipt = _served_receipt(notary_url, agent_token, effect_id)["receipt"]
        self._say(
            "7. A confirmation email through a tier-3 service (no idempotency key, no lookup): "
            "the agent is killed again after the send, which alone would leave it AMBIGUOUS for "
            f"a person. The email service's delivery webhook (event {message_id}, signed as "
            "Resend signs) reaches the notary, is verified and recorded as evidence, and "
            f"settles it: {receipt['final_state']}, citing ledger entry "
            f"{receipt['recheck_at_recovery']['evidence_seq']}. Emails sent: "
            f"{len(read_acts(store, effect_id))}; the restarted agent had "
            f"{len(recovered.stdout.splitlines())} effects left to recover."
        )

    def _verify_offline(
        self, notary_url: str, origin: str, effect_id: str, proved: dict[str, Any]
    ) -> None:
        """What an auditor does with the receipt and the published keys, and nothing else."""
        keys = httpx.get(f"{notary_url}/v1/keys").json()
        verifiers = [log_verifier(origin, parse_vkey(key["vkey"])) for key in keys]
        entries = []
        for shown in proved["entries"]:
            leaf = base64.b64decode(shown["leaf"])
            proof = parse_tlog_proof(proved["proofs"][str(shown["seq"])])
            checkpoint = proof.verify(leaf, verifiers, origin=origin)
            entries.append(entry_from_leaf(leaf))
        derived = derive_receipt(entries, effect_id)
        if derived != Receipt.from_dict(proved["receipt"]):
            raise CommandError(f"the receipt does not follow from its entries: {derived}")
        witnesses = WitnessPolicy.of(vkey for _, vkey in settings.LEDGER_WITNESSES)
        cosigners = witnesses.check(proved["checkpoint"])
        self._say(
            f"6. Checked with the published key alone: {len(entries)} entries, each proved "
            f"included in the signed tree of size {checkpoint.size}, and the receipt "
            f"re-derived from them: VERIFIED. The tree is cosigned by {len(cosigners)} "
            f"witnesses ({', '.join(sorted(cosigners))}), each checked with its own key."
        )

    def _be_the_agent(self, options: dict[str, Any]) -> None:
        """The agent process: a Gate whose journal is the notary."""
        kind = options["effect"]
        target, tier, key_window, evidence_window = EFFECTS[kind]
        service = HttpTarget(
            name=target,
            base_url=options["service"],
            tier=tier,
            queryable=tier == Tier.DEDUPES,
            key_window=key_window,
            max_inflight=MAX_INFLIGHT,
            timeout_seconds=MAX_INFLIGHT.total_seconds(),
            evidence_window=evidence_window,
            money=REFUND_MONEY if target == TARGET else None,
        )
        with NotaryJournal(options["notary"], options["token"]) as journal:
            gate = Gate(journal, {target: service}, premises_for=lambda _: [_payment_settled()])
            if options["agent"] == "submit":
                _print(gate.submit(_proposal(kind, options["tenant"], options["lease"])))
            else:
                for receipt in gate.recover():
                    _print(receipt)

    def _say(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(text) if text[:1].isdigit() else text)


def _served_receipt(notary_url: str, token: str, effect_id: str) -> dict[str, Any]:
    """The receipt as the notary serves it, with its entries, proofs and checkpoint."""
    shown: dict[str, Any] = httpx.get(
        f"{notary_url}/v1/effects/{effect_id}/receipt",
        headers={"Authorization": f"Bearer {token}"},
    ).json()
    return shown


def _killed_after_acting(
    notary_url: str, agent_token: str, service_url: str, tenant: str, lease_id: str, kind: str
) -> tuple[list[str], str]:
    """An agent process submits the effect and is SIGKILLed once the service acted, before it
    reads the answer; the agent's arguments (for the one that recovers) and the effect's id."""
    agent_args = [
        "--notary", notary_url, "--token", agent_token, "--service", service_url,
        "--tenant", tenant, "--lease", lease_id, "--effect", kind,
    ]  # fmt: skip
    crashed = _run_agent("submit", agent_args, crash_at=CrashPoint.AFTER_TARGET_ACTED)
    if crashed.returncode != -9:
        raise CommandError(f"the agent was meant to be killed: {crashed.stderr}")
    return agent_args, _proposal(kind, tenant, lease_id).effect_id


def _grant(
    notary_url: str, approver_token: str, action: str, *, limits: dict[str, int] | None = None
) -> dict[str, Any]:
    """An approver's lease on `action` for the demo's case, an hour long, for the refund bot."""
    body: dict[str, Any] = {
        "case_id": "case_4711",
        "action": action,
        "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "requested_by": "refund-bot",
    }
    if limits is not None:
        body["limits"] = limits
    granted = httpx.post(
        f"{notary_url}/v1/leases",
        headers={"Authorization": f"Bearer {approver_token}"},
        json=body,
    )
    granted.raise_for_status()
    lease: dict[str, Any] = granted.json()
    return lease


def _from_base_dir(arg: str) -> str:
    """A path under the project's folder as the README's commands write it, relative."""
    path = Path(arg)
    return (
        str(path.relative_to(settings.BASE_DIR)) if path.is_relative_to(settings.BASE_DIR) else arg
    )


def _proposal(kind: str, tenant: str, lease_id: str) -> Proposal:
    payloads: dict[str, dict[str, Any]] = {
        "refund": {"payment": "pay_100", "amount_cents": 2000},
        "email": {"to": "customer@example.com", "text": "Your refund of $20 is on the way"},
        "sms": {"to": "+15550100", "text": "Refund of $20 sent"},
    }
    payload = payloads[kind]
    return Proposal(
        case_id="case_4711",
        target=EFFECTS[kind][0],
        action=kind,
        payload=payload,
        lease_id=lease_id,
        premises=[_payment_settled()],
        tenant=tenant,
    )


def _payment_settled() -> Premise:
    return Premise("payment_settled", lambda: PremiseResult(True, {"status": "succeeded"}))


def _print(receipt: Receipt) -> None:
    print(json.dumps(receipt.to_dict()), flush=True)


def _run_agent(
    role: str, args: list[str], *, crash_at: CrashPoint | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "demo", "--agent", role, *args],
        cwd=settings.BASE_DIR,
        env=armed_env(crash_at),
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def _witnesses(signer: Signer) -> Iterator[list[RunningWitness]]:
    """Two witnesses for the notary's logs, each with its own key and state under
    var/witnesses/ (made by the witness's keygen on the first run, kept after)."""
    WITNESS_DIR.mkdir(parents=True, exist_ok=True)
    family = f"{settings.NOTARY_ORIGIN}={signer.verifier.vkey}"
    started: list[RunningWitness] = []
    try:
        for name in ("w1", "w2"):
            key = WITNESS_DIR / f"{name}.key"
            if key.exists():
                vkey = parse_cosigner_skey(key.read_text()).verifier.vkey
            else:
                vkey = witness_keygen(key, f"{name}.{DEMO_DOMAIN}")
            state = WITNESS_DIR / f"{name}.state"
            started.append(
                spawn_witness(
                    key=key,
                    vkey=vkey,
                    state=state,
                    logs=["--log-family", family],
                    init=not state.exists(),  # the first run; later runs keep what it cosigned
                )
            )
        yield started
    finally:
        for witness in started:
            witness.stop()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The demo prints its own story; a line per request would bury it."""


@contextmanager
def _serving_notary() -> Iterator[str]:
    server = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False)
    server.set_app(get_internal_wsgi_application())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
