"""A receipt as the notary serves it (`GET /v1/effects/<id>/receipt`), checked with nothing but
keys the checker trusts: the agent's journal checks it as it fetches it, and `python -m
gate_client.verify RECEIPT.json` checks a saved one offline.

The served JSON holds the receipt's fields, every entry they derive from as its exact leaf bytes
(lease entries included), a C2SP tlog-proof per entry against one signed checkpoint, and that
checkpoint (with any witness cosignatures). Checked: the checkpoint opens under a trusted key
named after its log, carries the witnesses' cosignatures the policy requires, every entry is
proved in its tree, and every field re-derives from the entries."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate_client.mandates import MandateError, check_evidence
from gate_client.receipts import Receipt, ReceiptError, derive_receipt
from ledger.core.checkpoint import Checkpoint, CheckpointError, open_checkpoint, parse_tlog_proof
from ledger.core.cosignature import CosignatureError, WitnessPolicy
from ledger.core.entries import Entry, EntryError, EntryKind, entry_from_leaf
from ledger.core.merkle import ProofError, leaf_hash, verify_inclusion
from ledger.core.note import Verifier


class NotProved(ValueError):
    """The served receipt does not hold: an entry unreadable or not in the tree, a checkpoint
    no trusted key signed, a field that does not follow from the entries."""


@dataclass(frozen=True)
class CheckedReceipt:
    receipt: Receipt
    entries: list[Entry]
    checkpoint: Checkpoint
    cosigned_by: dict[str, int]  # trusted witness -> the time it cosigned


def shown_entry(shown: Mapping[str, Any]) -> Entry:
    """An entry from its exact leaf bytes; the hash and seq stated beside them must be theirs."""
    try:
        entry = entry_from_leaf(base64.b64decode(shown["leaf"], validate=True))
    except (EntryError, ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise NotProved(f"an unreadable entry: {exc}") from exc
    if entry.entry_hash.hex() != shown.get("entry_hash") or entry.seq != shown.get("seq"):
        raise NotProved(f"entry {shown.get('seq')}: stated hash or seq does not match its bytes")
    return entry


def check_inclusion(
    entries: Sequence[Entry], proofs: Mapping[str, Any], note: str, checkpoint: Checkpoint
) -> None:
    """Every entry the checkpoint covers is proved included in its tree, by a proof against
    that very note; entries appended since have no proof yet and are skipped."""
    for entry in entries:
        text = proofs.get(str(entry.seq))
        if text is None and entry.seq >= checkpoint.size:
            continue
        if text is None:
            raise NotProved(f"entry {entry.seq} has no proof against the checkpoint")
        try:
            proof = parse_tlog_proof(str(text))
            if proof.signed_checkpoint != note or proof.index != entry.seq:
                raise CheckpointError("the proof is for another entry or checkpoint")
            verify_inclusion(
                leaf_hash=leaf_hash(entry.leaf_bytes()),
                index=entry.seq,
                size=checkpoint.size,
                proof=proof.hashes,
                root=checkpoint.root,
            )
        except (CheckpointError, ProofError) as exc:
            raise NotProved(f"entry {entry.seq} is not proved in the checkpoint: {exc}") from exc


def check_receipt(
    shown: Mapping[str, Any],
    entries: Sequence[Entry],
    *,
    effect_id: str,
    payload_hash: str | None = None,
) -> Receipt:
    """The receipt of `effect_id` derived from `entries`, which must be the one shown, field
    for field."""
    try:
        fields = shown["receipt"]
        receipt = derive_receipt(entries, effect_id, payload_hash=payload_hash)
    except (ReceiptError, KeyError, TypeError) as exc:
        raise NotProved(f"the receipt does not derive from its entries: {exc}") from exc
    if receipt.to_dict() != fields:
        raise NotProved(f"receipt {effect_id}: the fields shown differ from its entries")
    for entry in entries:
        if entry.kind == EntryKind.LEASE_GRANTED:
            try:
                check_evidence(entry.body_value(), granted_at=entry.created_at)
            except MandateError as exc:
                raise NotProved(f"lease entry {entry.seq}: its mandate: {exc.detail}") from exc
    return receipt


def check_served_receipt(
    shown: Mapping[str, Any],
    trusted: Sequence[Verifier],
    *,
    witnesses: WitnessPolicy = WitnessPolicy(),  # noqa: B008 (a frozen value, never mutated)
) -> CheckedReceipt:
    """A saved receipt, checked offline as a whole: covered by its checkpoint in full."""
    note = shown.get("checkpoint")
    if not isinstance(note, str):
        raise NotProved("no signed checkpoint covers it yet: fetch it again after the next one")
    origin = note.split("\n", 1)[0]
    keys = [key for key in trusted if key.name == origin]
    if not keys:
        raise NotProved(f"no trusted key is named {origin!r}, the log's origin")
    try:
        checkpoint = open_checkpoint(note, keys, origin=origin)
        cosigned_by = witnesses.check(note)
    except (CheckpointError, CosignatureError) as exc:
        raise NotProved(f"the checkpoint: {exc}") from exc
    entries = [shown_entry(e) for e in shown.get("entries", [])]
    uncovered = [e.seq for e in entries if e.seq >= checkpoint.size]
    if uncovered:
        raise NotProved(
            f"entries {uncovered} came after the checkpoint (size {checkpoint.size}): fetch the "
            "receipt again after the next one"
        )
    check_inclusion(entries, shown.get("proofs") or {}, note, checkpoint)
    fields = shown.get("receipt") or {}
    receipt = check_receipt(
        shown,
        entries,
        effect_id=str(fields.get("effect_id")),
        payload_hash=(fields.get("proposed") or {}).get("payload_hash"),
    )
    return CheckedReceipt(receipt, entries, checkpoint, cosigned_by)
