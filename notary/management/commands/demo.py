from __future__ import annotations

import base64
import secrets
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from ledger import selectors, services
from ledger.core.checkpoint import log_verifier, open_checkpoint, parse_tlog_proof
from ledger.core.merkle import verify_consistency
from ledger.keys import load_signing_key, write_signing_key

DEMO_DOMAIN = "demo.interlock.example"


class Command(BaseCommand):
    help = (
        "Walk through one agent refund as the ledger records it: entries appended to a fresh log, "
        "a signed checkpoint, the log's vkey, a tlog-proof checked offline, a consistency proof, "
        "and a full verification."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--origin", help="log origin (default: a fresh demo log)")

    def handle(self, *args: Any, **options: Any) -> None:
        key_file = settings.NOTARY_SIGNING_KEY_FILE
        if not key_file.exists():
            write_signing_key(path=key_file, name=DEMO_DOMAIN)
            self._say(f"Created the notary signing key at {key_file}.")
        signer = load_signing_key()

        origin = options["origin"] or f"{DEMO_DOMAIN}/log-{secrets.token_hex(4)}"
        log = services.ensure_log(origin=origin)
        self._say(f"1. A log for one tenant: {origin}")

        effect_id = "eff_" + secrets.token_hex(16)
        story: list[tuple[str, dict[str, Any], str]] = [
            (
                "LEASE_GRANTED",
                {
                    "lease_id": "lease_1",
                    "case_id": "case_4711",
                    "action": "refund",
                    "max_amount_cents": 2000,
                    "granted_by": "support@shop.example",
                },
                "",
            ),
            (
                "PROPOSED",
                {
                    "case_id": "case_4711",
                    "target": "stripe",
                    "action": "refund",
                    "payload": {"payment": "pi_100", "amount_cents": 2000},
                    "premises": [
                        {"name": "payment_refundable", "observed": {"status": "succeeded"}}
                    ],
                },
                effect_id,
            ),
            ("DISPATCHED", {"attempt": 1, "lease_id": "lease_1", "lease_live": True}, effect_id),
            ("COMMITTED", {"attempt": 1, "result_ref": "re_123"}, effect_id),
        ]
        for kind, body, entry_effect in story:
            entry = services.append_entry(log=log, kind=kind, body=body, effect_id=entry_effect)
            self._say(
                f"   seq {entry.seq}  {kind:<14} entry hash {bytes(entry.entry_hash).hex()[:16]}…"
            )

        first = services.sign_checkpoint(log=log, signer=signer)
        self._say(
            "\n2. The notary signs a checkpoint (C2SP tlog-checkpoint, signed-note, Ed25519):"
        )
        self.stdout.write(first.note)
        verifier = log_verifier(origin, signer)
        self._say("3. The log's verifier key (give it to auditors):")
        self.stdout.write(verifier.vkey + "\n")

        committed_seq = len(story) - 1
        proof = selectors.tlog_proof(log=log, index=committed_seq)
        leaf = selectors.get_entry(log=log, seq=committed_seq).leaf_bytes()
        self._say(
            f"4. A C2SP tlog-proof that the COMMITTED entry (seq {committed_seq}) is in the log:"
        )
        self.stdout.write(proof.text())
        self._say("   The entry's exact leaf bytes:")
        self.stdout.write("   " + leaf.decode() + "\n")

        # Offline: only the proof text, the leaf bytes and the vkey — no database.
        checked = parse_tlog_proof(proof.text()).verify(leaf, [verifier], origin=origin)
        self._say(
            f"5. Offline check with only the vkey: signature valid, entry {committed_seq} included "
            f"in the tree of size {checked.size}: VERIFIED"
        )

        services.append_entry(
            log=log,
            kind="OBSERVED",
            effect_id=effect_id,
            body={"provider": "stripe", "event_type": "charge.refunded", "event_id": "evt_1"},
        )
        second = services.sign_checkpoint(log=log, signer=signer)
        old = open_checkpoint(first.note, [verifier], origin=origin)
        new = open_checkpoint(second.note, [verifier], origin=origin)
        verify_consistency(
            old_size=old.size,
            new_size=new.size,
            old_root=old.root,
            new_root=new.root,
            proof=selectors.consistency_proof(log=log, old_size=old.size, new_size=new.size),
        )
        self._say(
            f"6. One more entry, a new checkpoint of size {new.size}; the consistency proof from "
            f"size {old.size} verifies: the log only grew. "
            f"Root {base64.b64encode(new.root).decode()}"
        )

        self._say("7. Full verification of chain, tree and checkpoints:")
        call_command("verify_ledger", log=origin, no_progress=True, stdout=self.stdout)

    def _say(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(text) if text[:1].isdigit() else text)
