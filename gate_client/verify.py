"""Verify a receipts export offline: no Django, no network, only the export and trusted keys.

    python -m gate_client.verify EXPORT --vkey VKEY [--vkey VKEY ...]
        [--witness VKEY ... [--witness-quorum K] | --no-witnesses]
        [--max-cosignature-age SECONDS] [--as-of INSTANT]
        [--known-checkpoint FILE ...] [--summary CSV]
    python -m gate_client.verify RECEIPT.json --vkey VKEY (--witness VKEY ... | --no-witnesses)

RECEIPT.json is one receipt as GET /v1/effects/<id>/receipt serves it: its checkpoint must open
under a trusted key (and carry the witnesses' cosignatures), every entry be proved in its tree,
and every field re-derive from the entries (gate_client.proved). An export gets six separate
verdicts:
- authenticity: the export's checkpoint is signed by a key the auditor trusts (--vkey, given
  as many times as the notary has rotated keys), for the log the export names: a key is used
  under its own name only, which must be the log's origin (`GET /v1/logs/<origin>/vkey`), so
  one log's key never vouches for another log's export;
- witnesses: the checkpoint carries valid cosignatures (C2SP tlog-cosignature) of at least
  --witness-quorum (default: all) of the --witness keys, or without --witness of the witnesses
  the export's header names (at its stated quorum, never fewer than one): witnesses cosign only
  trees consistent with every one they cosigned before, so a log cannot show this export one
  history and them another. Each counted cosignature must be fresh, made at most
  --max-cosignature-age seconds (default a day) before now, or before --as-of INSTANT when the
  auditor checks an old export as of a moment of their choosing (the export's own time is the
  notary's word, not evidence): a log rolled back to an old cosigned checkpoint shows stale
  ones. Only --no-witnesses skips this verdict, and says so;
- integrity: every entry's bytes are proved included in that checkpoint's tree (in v3 and v2,
  within its subtree, whose hash the header states and which, with the others, makes the
  signed root; in v1, by its C2SP tlog-proof against the checkpoint; in v3 an entry a receipt
  line cites by seq must have been carried by one of the CITE_WINDOW lines before), every
  receipt's fields re-derive from its entries, every budget statement (what a dispatch
  under a budgeted lease says was spent before it) re-derives from the entries before it, the
  leases of one AP2 mandate counted together, and every mandate is spent in the ledger: a
  one-payment or Checkout Mandate granted once, an open one's leases within its totals;
- completeness: the export covers its stated seq range with every entry present exactly once,
  in order, up to a footer that counts what came before it, and every effect the filter
  selects (its state derived from its entries, wherever they are) has its receipt line; what
  is missing is named (the seqs no line carries, the effect without a receipt);
- history: every --known-checkpoint (a checkpoint of the log kept outside the export, e.g. one
  an agent or auditor saw earlier) verifies with the trusted keys, and the export's tree extends
  it: the same size has the same root, a larger one means the export's log was rolled back, and
  a smaller one must be the root of the export's first entries (which the export carries in
  full, every one proved in its tree, so the check needs no proof from the notary);
- outcomes: how many receipts ended in each final state (with --summary, also as CSV: counts
  and money per month, target, final state and currency), and how many reconciliation findings
  (RECONCILED entries: what a provider showed against the admitted effects) of each kind the
  export holds; a finding is evidence, and changes no receipt.
It exits 0 when all but the last hold, and 1 naming the first bad line and receipt otherwise."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import stat
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from gate_client.budgets import Total, budget_problems
from gate_client.export_format import (
    CITE_WINDOW,
    EXPORT_FORMAT,
    SUBTREES_TEXT_FORMAT,
    TLOG_PROOF_FORMAT,
    carried_envelope,
)
from gate_client.leases import Lease
from gate_client.mandates import (
    Mandate,
    MandateError,
    check_evidence,
    granted_terms,
    regrant_refusal,
)
from gate_client.proved import NotProved, check_served_receipt
from gate_client.receipts import ReceiptError, derive_receipt
from gate_client.summary import Summary, outcome_label
from ledger.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    Succession,
    open_checkpoint,
    parse_tlog_proof,
    succession,
)
from ledger.core.cosignature import (
    DEFAULT_MAX_COSIGNATURE_AGE,
    CosignatureError,
    WitnessPolicy,
)
from ledger.core.entries import Entry, EntryKind, entry_from_envelope, entry_from_leaf
from ledger.core.merkle import Frontier, ProofError, verify_inclusion
from ledger.core.note import NoteError, Verifier, parse_vkey
from ledger.core.subtrees import (
    root_of_subtrees,
    split_hashes,
    subtree_ranges,
    verify_in_subtree,
)

FORMATS = (EXPORT_FORMAT, SUBTREES_TEXT_FORMAT, TLOG_PROOF_FORMAT)
VERDICTS = ("authenticity", "witnesses", "integrity", "completeness", "history")
UNWITNESSED = WitnessPolicy()  # no witness trusted, none required: only --no-witnesses


class Failure(Exception):
    def __init__(self, verdict: str, where: str, detail: str) -> None:
        super().__init__(f"{verdict}: {where}: {detail}")
        self.verdict = verdict
        self.where = where
        self.detail = detail


@dataclass
class Report:
    origin: str = ""
    size: int = 0
    receipts: int = 0
    entries: int = 0  # entry lines
    proved: int = 0  # distinct entries proved in the tree: each seq once, at its home
    copies: int = 0  # copies carried in receipt lines (lease entries), each proved too
    outcomes: Counter[str] = field(default_factory=Counter)
    budgets: int = 0  # budget statements re-derived from the log's entries
    findings: Counter[str] = field(default_factory=Counter)  # RECONCILED entries, by finding
    known: int = 0  # known checkpoints the export's tree was found consistent with
    cosigned_by: dict[str, int] = field(default_factory=dict)  # trusted witness -> timestamp
    witnesses: WitnessPolicy = UNWITNESSED  # what the cosignatures were checked against
    named: bool = False  # the witnesses are those the export names, not the auditor's
    summary: Summary = field(default_factory=lambda: Summary())


@dataclass(frozen=True)
class NamedWitnesses:
    """Check the witnesses the export's header names, at the quorum it states and never fewer
    than one, with cosignatures at most `max_age` seconds older than `as_of` (None: now). The
    CLI's default: an export that names none is refused, never passed unwitnessed."""

    max_age: int = DEFAULT_MAX_COSIGNATURE_AGE
    as_of: int | None = None

    def policy(self, header: dict[str, Any]) -> WitnessPolicy:
        named = _named_witnesses(header.get("witnesses", {"vkeys": [], "quorum": 0}))
        if not named.witnesses:
            raise Failure(
                "witnesses",
                "line 1",
                "the export names no witnesses, so nothing shows its checkpoint is the one the "
                "witnesses saw: give the witnesses you trust (--witness VKEY), or --no-witnesses "
                "to verify it unwitnessed",
            )
        quorum = max(1, named.quorum)
        return replace(named, quorum=quorum, max_age=self.max_age, as_of=self.as_of)


@dataclass(frozen=True)
class KnownCheckpoint:
    """A signed checkpoint held outside the export, and where it came from (for messages)."""

    where: str
    note: str


def verify_export(
    lines: Iterable[bytes],
    trusted: Iterable[Verifier],
    *,
    known: Iterable[KnownCheckpoint] = (),
    witnesses: WitnessPolicy | NamedWitnesses = UNWITNESSED,
) -> Report:
    """Check an export line by line; raise Failure at the first thing wrong."""
    numbered = enumerate(lines, start=1)
    header = _header(next(numbered, (1, b""))[1])
    keys = list(trusted)
    checkpoint = _authentic_checkpoint(header, keys)
    cut = _Cut.of(header, checkpoint)
    named = isinstance(witnesses, NamedWitnesses)
    policy = witnesses.policy(header) if isinstance(witnesses, NamedWitnesses) else witnesses
    try:
        cosigned_by = policy.check(header["checkpoint"])
    except CosignatureError as exc:
        raise Failure("witnesses", "line 1", str(exc)) from exc
    held = _History.of(list(known), keys, header["checkpoint"], checkpoint)
    state = _Walk(
        header["checkpoint"],
        checkpoint,
        cut,
        _Filter.of(header),
        held,
        values=header["format"] == EXPORT_FORMAT,
    )
    report = Report(
        origin=header["origin"],
        size=checkpoint.size,
        cosigned_by=cosigned_by,
        witnesses=policy,
        named=named,
    )
    for number, raw in numbered:
        where = f"line {number}"
        if state.finished:
            raise Failure("completeness", where, "a line after the footer")
        _count_line(_record(raw, where), where, state, report)
    state.complete()
    report.proved, report.copies = state.proved, state.copied
    report.budgets = state.budgets
    report.findings = state.findings
    report.known = held.check()
    return report


class _History:
    """The known checkpoints, checked against the export's tree: those of its size or larger
    at once (from the notes alone), the smaller ones once every entry is in, from the root of
    the export's first entries (their leaf hashes are kept only when one is needed)."""

    def __init__(
        self,
        export_note: str,
        export: Checkpoint,
        prefixes: list[tuple[KnownCheckpoint, Checkpoint]],
    ) -> None:
        self.export_note = export_note
        self.export = export
        self.prefixes = prefixes
        self.count = 0
        self.leaves: bytearray | None = None

    @classmethod
    def of(
        cls,
        known: list[KnownCheckpoint],
        keys: list[Verifier],
        export_note: str,
        export: Checkpoint,
    ) -> _History:
        held = cls(export_note, export, [])
        for given in known:
            checkpoint = held.opened(given, keys)
            step = succession(
                held_size=checkpoint.size,
                held_root=checkpoint.root,
                size=export.size,
                root=export.root,
            )
            if step is Succession.ROLLBACK:
                held.rewritten(
                    given,
                    f"a rollback: the log was signed at size {checkpoint.size}, the export's "
                    f"checkpoint is smaller ({export.size})",
                )
            if step is Succession.FORK:
                held.rewritten(
                    given, f"a fork: two checkpoints of size {export.size}, roots differ"
                )
            if step is Succession.EXTENDS and checkpoint.size > 0:
                held.prefixes.append((given, checkpoint))
            else:
                held.count += 1
        if held.prefixes:
            held.leaves = bytearray(32 * max(c.size for _, c in held.prefixes))
        return held

    def opened(self, given: KnownCheckpoint, keys: list[Verifier]) -> Checkpoint:
        origin = self.export.origin
        try:
            return open_checkpoint(given.note, [k for k in keys if k.name == origin], origin=origin)
        except CheckpointError as exc:
            raise Failure(
                "history", given.where, f"not a checkpoint of {origin} by a trusted key: {exc}"
            ) from exc

    def rewritten(self, given: KnownCheckpoint, what: str) -> None:
        raise Failure(
            "history",
            given.where,
            f"history rewritten, {what}\n--- known checkpoint ---\n{given.note}"
            f"--- the export's checkpoint ---\n{self.export_note}",
        )

    def leaf(self, seq: int, entry_hash: bytes) -> None:
        if self.leaves is not None and 32 * seq < len(self.leaves):
            self.leaves[32 * seq : 32 * seq + 32] = entry_hash

    def check(self) -> int:
        """The prefix checks, once every entry is in; the number of known checkpoints."""
        if self.leaves is None:
            return self.count
        frontier = Frontier()
        for given, checkpoint in sorted(self.prefixes, key=lambda pair: pair[1].size):
            while frontier.size < checkpoint.size:
                start = 32 * frontier.size
                frontier.append(bytes(self.leaves[start : start + 32]))
            if frontier.root() != checkpoint.root:
                self.rewritten(
                    given,
                    f"a fork: the export's first {checkpoint.size} entries have another root "
                    "than the known checkpoint of that size",
                )
        return self.count + len(self.prefixes)


def _authentic_checkpoint(header: dict[str, Any], trusted: Iterable[Verifier]) -> Checkpoint:
    """The header's checkpoint, signed by a trusted key named after the log the export names,
    also opened by the export's own keys, and covering the whole range the export states.

    A trusted key is never renamed: the notary signs every log with one key, each under the
    log's origin, so a key renamed to the export's origin would accept any tenant's export."""
    origin = header["origin"]
    given = list(trusted)
    keys = [key for key in given if key.name == origin]
    if not keys:
        names = ", ".join(sorted({key.name for key in given})) or "none"
        raise Failure(
            "authenticity",
            "line 1",
            f"no trusted key is named {origin!r}, the export's log (trusted: {names}); "
            "a log's vkey is published at /v1/logs/<origin>/vkey",
        )
    try:
        checkpoint = open_checkpoint(header["checkpoint"], keys, origin=origin)
    except CheckpointError as exc:
        raise Failure("authenticity", "line 1", str(exc)) from exc
    try:
        # Every key the notary has used is listed; after a rotation only one signed this.
        own = [parse_vkey(vkey) for vkey in header["vkeys"]]
        if [key.vkey for key in own] != header["vkeys"]:
            # Each in the one spelling its key gives it: an altered header is no header.
            raise NoteError("a vkey is not spelled as its key spells it")
        open_checkpoint(header["checkpoint"], own, origin=origin)
    except (NoteError, CheckpointError, TypeError, KeyError) as exc:
        raise Failure("authenticity", "line 1", f"the export's own vkeys: {exc}") from exc
    first, end = header["range"]["first"], header["range"]["end"]
    if (first, end) != (0, checkpoint.size):
        raise Failure("authenticity", "line 1", f"range {first}..{end} is not the checkpoint's")
    return checkpoint


@dataclass(frozen=True)
class _Cut:
    """How a v3 or v2 export proves its entries: the header's hashes of the tree's subtrees of
    2**height entries, which must make the checkpoint's root, and each entry's proof within its
    subtree. None of it in a v1 export, whose entries each carry a whole C2SP tlog-proof."""

    height: int
    hashes: bytes

    @classmethod
    def of(cls, header: dict[str, Any], checkpoint: Checkpoint) -> _Cut | None:
        if header["format"] == TLOG_PROOF_FORMAT:
            return None
        try:
            stated = header["subtrees"]
            height = stated["height"]
            if not isinstance(height, int) or isinstance(height, bool):
                raise TypeError("height is not an integer")
            hashes = split_hashes(_hashes_of(stated["hashes"]))
            expected = len(subtree_ranges(checkpoint.size, height))
        except (KeyError, TypeError, binascii.Error, ProofError) as exc:
            raise Failure("authenticity", "line 1", f"unreadable subtrees: {exc}") from exc
        if len(hashes) != expected or root_of_subtrees(hashes) != checkpoint.root:
            raise Failure(
                "authenticity",
                "line 1",
                f"the {len(hashes)} subtree hashes do not make the checkpoint's root",
            )
        return cls(height, b"".join(hashes))


def _count_line(record: dict[str, Any], where: str, state: _Walk, report: Report) -> None:
    """One line after the header, checked by its type and counted in the report; the footer
    must count the lines before it and ends the export."""
    kind = record.get("type")
    if kind == "receipt":
        derived, proposed = state.receipt(record, where)
        final_state, contradicted = str(derived["final_state"]), bool(derived["contradicted"])
        report.receipts += 1
        report.outcomes[outcome_label(final_state, contradicted)] += 1
        report.summary.add(final_state, proposed, contradicted=contradicted)
    elif kind == "entry":
        state.entry(record, where)
        report.entries += 1
    elif kind == "footer":
        state.footer(record, where, (report.receipts, report.entries))
    else:
        raise Failure("integrity", where, f"unknown line type {kind!r}")


class _Walk:
    """What has been seen so far: one bit per seq, the copies of lease entries to match with
    their homes, and the last effect id and seq, which must only grow; the effects with a
    receipt line, and the entries of the others the filter's time range selects, to derive
    their states once all are in (with a state filter, an effect left to entry lines must be
    one whose state the filter refuses)."""

    def __init__(
        self,
        note: str,
        checkpoint: Checkpoint,
        cut: _Cut | None,
        wanted: _Filter,
        held: _History,
        *,
        values: bool,
    ) -> None:
        self.note = note
        self.checkpoint = checkpoint
        self.cut = cut
        self.values = values  # v3: entries carried as JSON values, others cited by seq
        self.receipt_lines = 0
        # v3: the entries of other effects each receipt line carried, by seq, with the line,
        # as long as a later line may cite them (CITE_WINDOW lines).
        self.citable: dict[int, tuple[Entry, int]] = {}
        self.wanted = wanted
        self.held = held
        self.seen = bytearray(checkpoint.size)
        self.copies: dict[int, bytes] = {}
        self.last_effect = ""
        self.last_seq = -1
        self.finished = False
        self.proved = 0  # homes: distinct entries
        self.copied = 0
        self.findings: Counter[str] = Counter()
        self.receipted: set[str] = set()
        self.loose: dict[str, list[Entry]] = {}
        self.out_of_time: set[str] = set()
        # The entries of every effect that spent from a budget, from its spending dispatch
        # on: what its statement and the later ones are re-derived from.
        self.spending: dict[str, list[Entry]] = {}
        self.budgets = 0
        # AP2 mandates: the leases granted from each (by mandate hash, in ledger order), each
        # such lease's budget pool (its mandate's hash), and the totals of the open ones.
        self.granted: dict[str, list[str]] = {}
        self.pools: dict[str, str] = {}
        self.totals: dict[str, Total] = {}

    def receipt(self, record: dict[str, Any], where: str) -> tuple[dict[str, Any], Entry]:
        """The receipt line checked: the receipt derived from its entries, and its effect's
        PROPOSED entry."""
        effect_id = record.get("effect_id")
        if not isinstance(effect_id, str) or not isinstance(record.get("entries"), list):
            raise Failure("integrity", where, "a receipt line needs effect_id and entries")
        where = f"{where}, receipt {effect_id}"
        entries = self._line_entries(record["entries"], effect_id, where)
        stated = record.get("receipt")
        try:
            derived = derive_receipt(entries, effect_id).to_dict()
        except ReceiptError as exc:
            raise Failure("integrity", where, str(exc)) from exc
        proposed = next(e for e in entries if e.effect_id == effect_id and e.kind == "PROPOSED")
        if not self.wanted.admits(proposed, derived["final_state"]):
            raise Failure("integrity", where, "the receipt does not match the stated filter")
        if self.last_seq >= 0:
            raise Failure("completeness", where, "a receipt line after the entry lines")
        if effect_id <= self.last_effect:
            raise Failure("completeness", where, "receipt lines are not in effect id order")
        self.last_effect = effect_id
        self.receipted.add(effect_id)
        if stated != derived:
            differing = sorted(
                k for k in derived if not isinstance(stated, dict) or stated.get(k) != derived[k]
            )
            raise Failure(
                "integrity", where, f"{', '.join(differing)} do not follow from its entries"
            )
        return derived, proposed

    def _line_entries(self, items: list[Any], effect_id: str, where: str) -> list[Entry]:
        """A receipt line's entries, in seq order, once each: its effect's own are their home,
        another's (a lease's) are copies, or in v3 cited by seq."""
        self.receipt_lines += 1
        if self.receipt_lines % CITE_WINDOW == 0:  # forget what no line from here may cite
            self.citable = {
                s: (e, line)
                for s, (e, line) in self.citable.items()
                if self.receipt_lines - line <= CITE_WINDOW
            }
        entries = []
        carried = []
        for item in items:
            if self.values and isinstance(item, int) and not isinstance(item, bool):
                entries.append(self._cited(item, where))
                continue
            entry = self._proved(item, where, line_effect=effect_id)
            entries.append(entry)
            carried.append(entry)
        if [e.seq for e in entries] != sorted({e.seq for e in entries}):
            raise Failure("integrity", where, "its entries are not in seq order, once each")
        for entry in carried:
            if entry.effect_id == effect_id:
                self._home(entry, where)
            else:
                self._copy(entry, where)
                if self.values:
                    self.citable[entry.seq] = (entry, self.receipt_lines)
        return entries

    def _cited(self, seq: int, where: str) -> Entry:
        """The entry a v3 receipt line cites by seq: one of the CITE_WINDOW lines before it
        carried it."""
        found = self.citable.get(seq)
        if found is None or self.receipt_lines - found[1] > CITE_WINDOW:
            raise Failure(
                "integrity",
                where,
                f"it cites entry {seq}, which none of the {CITE_WINDOW} receipt lines before "
                "it carried",
            )
        self.copied += 1
        return found[0]

    def entry(self, record: dict[str, Any], where: str) -> None:
        entry = self._proved(record, where)
        where = f"{where}, entry {entry.seq}"
        if entry.seq <= self.last_seq:
            raise Failure("completeness", where, "entry lines are not in seq order")
        self.last_seq = entry.seq
        if entry.kind == "PROPOSED" and self.wanted.admits_any_state(entry):
            raise Failure(
                "completeness", where, f"{entry.effect_id} matches the filter, no receipt"
            )
        self._home(entry, where)
        if entry.effect_id:
            self._loose(entry, where)

    def _loose(self, entry: Entry, where: str) -> None:
        """An effect's entry on an entry line: never one with a receipt line (its receipt would
        be derived without it), else kept while its effect may match the filter."""
        effect_id = entry.effect_id
        if effect_id in self.receipted:
            raise Failure(
                "completeness", where, f"an entry of {effect_id}, missing from its receipt line"
            )
        if effect_id in self.out_of_time:
            return
        if entry.kind == "PROPOSED" and not self.wanted.admits_time(entry):
            self.out_of_time.add(effect_id)
            self.loose.pop(effect_id, None)
            return
        self.loose.setdefault(effect_id, []).append(entry)

    def footer(self, record: dict[str, Any], where: str, counted: tuple[int, int]) -> None:
        """The footer: every seq has its line, and it counts the lines before it."""
        stated = (record.get("receipts"), record.get("entries"))
        missing = self._missing()
        if missing or stated != counted:
            problems = []
            if missing:
                problems.append(f"entries {missing} are missing: no line carries them")
            if stated[0] != counted[0]:
                problems.append(
                    f"the footer counts {stated[0]} receipt lines, {counted[0]} are here"
                )
            if stated[1] != counted[1]:
                problems.append(f"the footer counts {stated[1]} entry lines, {counted[1]} are here")
            raise Failure("completeness", where, "; ".join(problems))
        self.finished = True

    def complete(self) -> None:
        if not self.finished:
            raise Failure("completeness", "end of export", "no footer: the export was cut short")
        missing = self._missing()
        if missing:
            raise Failure("completeness", "end of export", f"entries {missing} are missing")
        for effect_id in sorted(self.loose):
            self._unreceipted(effect_id, self.loose[effect_id])
        problems, self.budgets = budget_problems(
            (entry for history in self.spending.values() for entry in history),
            pools=self.pools,
            totals=self.totals,
        )
        if problems:
            raise Failure("integrity", "budget statements", problems[0])

    def _unreceipted(self, effect_id: str, entries: list[Entry]) -> None:
        """An effect left to entry lines: its state, derived from them, must not match."""
        seqs = ", ".join(str(e.seq) for e in entries)
        where = f"entry lines, effect {effect_id}"
        proposed = next((e for e in entries if e.kind == "PROPOSED"), None)
        if proposed is None:
            raise Failure("completeness", where, f"entries {seqs} but no PROPOSED entry")
        try:
            final_state = derive_receipt(entries, effect_id).final_state
        except ReceiptError as exc:
            raise Failure("integrity", where, str(exc)) from exc
        if self.wanted.admits(proposed, final_state):
            raise Failure(
                "completeness",
                where,
                f"its receipt is missing: {effect_id} is {final_state} by its entries "
                f"({seqs}), which the filter selects",
            )

    def _missing(self) -> str:
        """The seqs no line carries, as ranges ('3-5, 9'), the first ten; '' if none."""
        ranges: list[str] = []
        more = 0
        start = self.seen.find(0)
        while start >= 0:
            end = self.seen.find(1, start)
            end = len(self.seen) if end < 0 else end
            if len(ranges) < 10:
                ranges.append(str(start) if end == start + 1 else f"{start}-{end - 1}")
            else:
                more += 1
            start = self.seen.find(0, end)
        return ", ".join(ranges) + (f" and {more} more ranges" if more else "")

    def _proved(self, item: Any, where: str, *, line_effect: str = "") -> Entry:
        """The entry in `item`, proved included in the checkpoint's tree; `line_effect` is the
        receipt line's effect id, which a v3 entry of that effect leaves out."""
        try:
            if self.values:
                entry = entry_from_envelope(
                    carried_envelope(item["entry"], line_effect=line_effect)
                )
            else:
                entry = entry_from_leaf(_leaf_of(item, v1=self.cut is None))
        except (KeyError, TypeError, UnicodeError, binascii.Error, ValueError) as exc:
            raise Failure("integrity", where, f"unreadable entry: {exc}") from exc
        if not self.values and item.get("seq") != entry.seq:
            raise Failure("integrity", where, f"entry {entry.seq} is labelled as another seq")
        hashes: Sequence[bytes]
        if self.cut is None:
            hashes = self._tlog_proof(item, entry, where)
        else:
            try:
                hashes = split_hashes(_hashes_of(item["proof"]))
            except (KeyError, TypeError, binascii.Error, ProofError) as exc:
                raise Failure("integrity", where, f"unreadable proof: {exc}") from exc
        try:
            if self.cut is None:
                verify_inclusion(
                    leaf_hash=entry.entry_hash,
                    index=entry.seq,
                    size=self.checkpoint.size,
                    proof=hashes,
                    root=self.checkpoint.root,
                )
            else:
                verify_in_subtree(
                    leaf_hash=entry.entry_hash,
                    index=entry.seq,
                    size=self.checkpoint.size,
                    height=self.cut.height,
                    proof=hashes,
                    subtree_hashes=self.cut.hashes,
                )
        except ProofError as exc:
            raise Failure(
                "integrity", where, f"entry {entry.seq} is not in the tree: {exc}"
            ) from exc
        return entry

    def _tlog_proof(self, item: Any, entry: Entry, where: str) -> tuple[bytes, ...]:
        """A v1 entry's C2SP tlog-proof: for this entry, against the header's checkpoint."""
        try:
            proof = parse_tlog_proof(item["proof"])
        except (KeyError, TypeError, CheckpointError) as exc:
            raise Failure("integrity", where, f"unreadable entry: {exc}") from exc
        if proof.index != entry.seq:
            raise Failure("integrity", where, f"entry {entry.seq} is labelled as another seq")
        if proof.signed_checkpoint != self.note:
            raise Failure("integrity", where, f"entry {entry.seq} is proved against another tree")
        return proof.hashes

    def _home(self, entry: Entry, where: str) -> None:
        if self.seen[entry.seq]:
            raise Failure("completeness", where, f"entry {entry.seq} appears twice")
        if entry.kind == EntryKind.LEASE_GRANTED:
            self._granted(entry, where)
        self.seen[entry.seq] = 1
        self.proved += 1
        if entry.effect_id in self.spending:
            self.spending[entry.effect_id].append(entry)
        elif (
            entry.kind == "DISPATCHED"
            and b'"budget":' in entry.body
            and ("budget" in entry.body_value())
        ):
            self.spending[entry.effect_id] = [entry]
        if entry.kind == EntryKind.RECONCILED:
            body = entry.body_value()
            finding = body.get("finding") if isinstance(body, dict) else None
            self.findings[finding if isinstance(finding, str) else "unreadable"] += 1
        self.held.leaf(entry.seq, entry.entry_hash)
        copy = self.copies.pop(entry.seq, None)
        if copy is not None and copy != entry.entry_hash:
            raise Failure("integrity", where, f"entry {entry.seq} differs from its copy")

    def _granted(self, entry: Entry, where: str) -> None:
        """A lease granted from an AP2 mandate spends it: once, for a one-payment or Checkout
        Mandate; an open one's leases share its totals, named by the hash computed from the
        token (not the one the entry states, which check_evidence compares with it)."""
        mandate = _check_mandate(entry, where)
        if mandate is None:
            return
        lease = Lease.from_body(entry.body_value())
        terms = granted_terms(lease, mandate)
        earlier = self.granted.setdefault(mandate.mandate_hash, [])
        refusal = regrant_refusal(mandate, terms, earlier)
        if refusal is not None:
            raise Failure("integrity", where, f"lease entry {entry.seq}: {refusal}")
        earlier.append(lease.lease_id)
        self.pools[lease.lease_id] = mandate.mandate_hash
        total = terms.total
        if total is not None:
            self.totals[mandate.mandate_hash] = total

    def _copy(self, entry: Entry, where: str) -> None:
        self.copied += 1
        if self.seen[entry.seq] or entry.seq in self.copies:
            known = self.copies.get(entry.seq)
            if known is not None and known != entry.entry_hash:
                raise Failure("integrity", where, f"entry {entry.seq} differs from its copy")
            return
        self.copies[entry.seq] = entry.entry_hash


def _hashes_of(text: Any) -> bytes:
    """Joined hashes in base64, spelled only the one way that encodes them: the bits padding
    leaves over must be zero, so no other text stands for the same hashes."""
    if not isinstance(text, str):
        raise TypeError("hashes are not a base64 string")
    joined = base64.b64decode(text, validate=True)
    if base64.b64encode(joined).decode("ascii") != text:
        raise binascii.Error("not the canonical base64 of its bytes")
    return joined


def _leaf_of(item: Any, *, v1: bool) -> bytes:
    """An entry's exact bytes before v3: in v1 as base64, in v2 as the text of its UTF-8."""
    if v1:
        return base64.b64decode(item["leaf"], validate=True)
    text = item["text"]
    if not isinstance(text, str):
        raise TypeError("an entry's text is not a string")
    return text.encode("utf-8")


def _check_mandate(entry: Entry, where: str) -> Mandate | None:
    """A lease granted from an AP2 mandate: the mandate's signatures verify again, offline,
    with the keys the entry records, as at the grant, and the lease is within it. Whether those
    keys are the signers' is the auditor's to judge by their ids (RFC 7638 thumbprints)."""
    try:
        return check_evidence(entry.body_value(), granted_at=entry.created_at)
    except MandateError as exc:
        raise Failure(
            "integrity", where, f"lease entry {entry.seq}: its mandate: {exc.code}: {exc.detail}"
        ) from exc


@dataclass(frozen=True)
class _Filter:
    """The export's stated selection: proposed in [since, until), final state `state` (a prefix
    when it ends in *). Receipt lines must match it; with no state in it, an effect left to
    entry lines must not (its state would need all its entries at once to judge)."""

    since: datetime | None
    until: datetime | None
    state: str | None

    @classmethod
    def of(cls, header: dict[str, Any]) -> _Filter:
        try:
            stated = header["filter"]
            since, until = (_moment(stated[key]) for key in ("from", "to"))
            state = stated["state"]
            if state is not None and not isinstance(state, str):
                raise TypeError("state is not a string")
        except (KeyError, TypeError, ValueError) as exc:
            raise Failure("authenticity", "line 1", f"unreadable filter: {exc}") from exc
        return cls(since, until, state)

    def admits(self, proposed: Entry, final_state: str) -> bool:
        if not self._in_time(proposed):
            return False
        if self.state is None:
            return True
        if self.state.endswith("*"):
            return final_state.startswith(self.state[:-1])
        return final_state == self.state

    def admits_any_state(self, proposed: Entry) -> bool:
        return self.state is None and self._in_time(proposed)

    def admits_time(self, proposed: Entry) -> bool:
        return self._in_time(proposed)

    def _in_time(self, proposed: Entry) -> bool:
        at = proposed.created_at
        return (self.since is None or at >= self.since) and (self.until is None or at < self.until)


def _moment(text: Any) -> datetime | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
        ok = isinstance(header, dict) and header.get("type") == "header"
        ok = ok and header.get("format") in FORMATS
        ok = (
            ok
            and isinstance(header.get("origin"), str)
            and isinstance(header.get("checkpoint"), str)
        )
        ok = (
            ok
            and isinstance(header["range"]["first"], int)
            and isinstance(header["range"]["end"], int)
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise Failure("authenticity", "line 1", f"no readable header: {exc}") from exc
    if not ok:
        raise Failure("authenticity", "line 1", f"not an {EXPORT_FORMAT} header")
    if "witnesses" in header:
        _named_witnesses(header["witnesses"])
    return dict(header)


def _named_witnesses(named: Any) -> WitnessPolicy:
    """The header's `witnesses` ({"vkeys": [...], "quorum": k}) as a policy: whose
    cosignatures the notary publishes, and how many it requires."""
    try:
        if not isinstance(named, dict) or set(named) != {"vkeys", "quorum"}:
            raise TypeError("not an object of vkeys and quorum")
        vkeys, quorum = named["vkeys"], named["quorum"]
        if not isinstance(vkeys, list) or not all(isinstance(v, str) for v in vkeys):
            raise TypeError("vkeys is not a list of cosigner vkeys")
        if not isinstance(quorum, int) or isinstance(quorum, bool):
            raise TypeError("quorum is not a number")
        return WitnessPolicy.of(vkeys, quorum)
    except (TypeError, CosignatureError) as exc:
        raise Failure("authenticity", "line 1", f"the header's witnesses: {exc}") from exc


def _record(raw: bytes, where: str) -> dict[str, Any]:
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise Failure("integrity", where, f"not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise Failure("integrity", where, "not a JSON object")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        trusted = [parse_vkey(vkey) for vkey in args.vkey]
    except NoteError as exc:
        parser.error(f"--vkey: {exc}")
    witnesses = _witness_policy(parser, args)
    served = _served_receipt(args.export)
    if served is not None:
        if args.known_checkpoint or args.summary:
            parser.error("--known-checkpoint and --summary are for exports, not one receipt")
        if isinstance(witnesses, NamedWitnesses):
            parser.error(
                "a receipt names no witnesses: give the ones you trust (--witness VKEY), or "
                "--no-witnesses to check it unwitnessed"
            )
        return _check_one_receipt(served, trusted, witnesses)
    known = _known_checkpoints(parser, args.known_checkpoint)
    with args.export.open("rb") as export:
        try:
            with _Progress(export) as lines:
                report = verify_export(lines, trusted, known=known, witnesses=witnesses)
        except Failure as failure:
            _print_failure(failure)
            return 1
    _print_report(report)
    if args.summary is not None:
        with args.summary.open("w", newline="", encoding="utf-8") as out:
            report.summary.write_csv(out)
        print(f"summary: {len(report.summary.rows):,} rows written to {args.summary}")
    return 0


def _witness_policy(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> WitnessPolicy | NamedWitnesses:
    """The auditor's witnesses (--witness), none (--no-witnesses), or by default those the
    export names; with the freshness bound and the instant verified as of."""
    if args.max_cosignature_age <= 0:
        parser.error("--max-cosignature-age: a positive number of seconds")
    as_of = _instant(parser, args.as_of) if args.as_of is not None else None
    if args.no_witnesses:
        if args.witness or args.witness_quorum is not None:
            parser.error("--no-witnesses checks no witnesses: give it without --witness")
        return UNWITNESSED
    if not args.witness:
        if args.witness_quorum is not None:
            parser.error("--witness-quorum counts the --witness keys: give them")
        return NamedWitnesses(max_age=args.max_cosignature_age, as_of=as_of)
    try:
        policy = WitnessPolicy.of(args.witness, args.witness_quorum)
    except CosignatureError as exc:
        parser.error(f"--witness: {exc}")
    return replace(policy, max_age=args.max_cosignature_age, as_of=as_of)


def _instant(parser: argparse.ArgumentParser, text: str) -> int:
    """--as-of: seconds since the Unix epoch, or an ISO 8601 time with its offset."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        parser.error(f"--as-of {text!r}: Unix seconds or an ISO 8601 time with its offset")
    return int(moment.timestamp())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gate_client.verify", description=__doc__)
    parser.add_argument(
        "export",
        type=Path,
        help="a receipts export (JSON Lines), or one receipt as GET /v1/effects/<id>/receipt "
        "serves it (JSON)",
    )
    parser.add_argument(
        "--vkey",
        action="append",
        required=True,
        help="a trusted key of the export's log, named after its origin (repeat per rotation)",
    )
    parser.add_argument(
        "--witness",
        action="append",
        default=[],
        metavar="VKEY",
        help="a trusted witness's cosignature/v1 vkey (repeatable)",
    )
    parser.add_argument(
        "--witness-quorum",
        type=int,
        metavar="K",
        help="how many of the --witness keys must have cosigned the checkpoint (default: all)",
    )
    parser.add_argument(
        "--no-witnesses",
        action="store_true",
        help="check no cosignatures: without --witness, the witnesses the export names are "
        "checked, and an export naming none is refused",
    )
    parser.add_argument(
        "--max-cosignature-age",
        type=int,
        default=DEFAULT_MAX_COSIGNATURE_AGE,
        metavar="SECONDS",
        help="count only cosignatures made at most this long before now, or before --as-of "
        f"(default: {DEFAULT_MAX_COSIGNATURE_AGE}, a day): an old cosigned checkpoint served "
        "again is what a rollback looks like",
    )
    parser.add_argument(
        "--as-of",
        metavar="INSTANT",
        help="verify as of this instant (Unix seconds, or ISO 8601 with an offset) instead of "
        "now: for an export made before the freshness bound",
    )
    parser.add_argument(
        "--known-checkpoint",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a signed checkpoint of the log seen before (repeatable): the export's tree must "
        "extend it, or the log was rolled back or forked",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        metavar="CSV",
        help="once verified, write the receipts' counts and money per month, target, final "
        "state and currency to this CSV file",
    )
    return parser


def _served_receipt(path: Path) -> dict[str, Any] | None:
    """The file as one served receipt (a JSON object with `receipt` and `entries`), or None
    for an export, whose first line is its header."""
    with path.open("rb") as given:
        first = given.readline()
        try:
            header = json.loads(first)
        except ValueError:
            header = None
        if isinstance(header, dict) and header.get("type") == "header":
            return None
        try:
            whole = json.loads(first + given.read(_MAX_RECEIPT_BYTES))
        except ValueError:
            return None
    return whole if isinstance(whole, dict) and "receipt" in whole else None


_MAX_RECEIPT_BYTES = 64 * 1024 * 1024  # far beyond any one receipt's entries


def _check_one_receipt(
    served: dict[str, Any], trusted: list[Verifier], witnesses: WitnessPolicy
) -> int:
    try:
        checked = check_served_receipt(served, trusted, witnesses=witnesses)
    except NotProved as exc:
        print(f"receipt: FAIL  {exc}")
        return 1
    receipt, checkpoint = checked.receipt, checked.checkpoint
    print(
        f"receipt: OK  {receipt.effect_id} {receipt.final_state}, re-derived from its "
        f"{len(checked.entries)} entries, each proved in the tree"
    )
    print(f"authenticity: OK  checkpoint of {checkpoint.origin} at size {checkpoint.size}")
    if witnesses.witnesses:
        names = ", ".join(sorted(checked.cosigned_by))
        print(f"witnesses: OK  cosigned by {names}, {witnesses.quorum} required")
    else:
        print("witnesses: not checked: --no-witnesses given")
    return 0


def _print_failure(failure: Failure) -> None:
    for verdict in VERDICTS:
        if verdict == failure.verdict:
            print(f"{verdict}: FAIL at {failure.where}: {failure.detail}")
        elif verdict == "authenticity":
            print("authenticity: OK  checkpoint signed by a trusted key")
        elif verdict == "witnesses" and failure.verdict != "authenticity":
            # Checked right after authenticity: any later failure means it held.
            print("witnesses: OK  checked before the failure")
        else:
            print(f"{verdict}: not decided: verification stops at the first failure")


def _print_report(report: Report) -> None:
    print(f"authenticity: OK  checkpoint of {report.origin} at size {report.size}, trusted key")
    print(f"witnesses: {_witnessed(report)}")
    print(
        f"integrity: OK  {report.receipts:,} receipts re-derived from their entries, "
        f"{report.proved:,} entries proved in the tree (and {report.copies:,} copies of "
        "lease entries carried in receipts, proved too)"
        + (
            f"; {report.budgets:,} budget statements re-derived from the log"
            if report.budgets
            else ""
        )
    )
    print(f"completeness: OK  every entry of [0, {report.size}) present once, in order")
    if report.known:
        print(f"history: OK  the export's tree extends {report.known} known checkpoint(s)")
    else:
        print("history: not checked: no --known-checkpoint given")
    print("outcomes:")
    for state, count in sorted(report.outcomes.items()):
        print(f"  {state:<34} {count:>8,}")
    if report.findings:
        print("reconciliation findings (evidence for a person, no verdict):")
        for finding, count in sorted(report.findings.items()):
            print(f"  {finding:<34} {count:>8,}")


class _Progress:
    """The export's lines, and how much of it is read on stderr when that is a terminal: bytes
    of the file's size (known before reading, and exact whatever the lines hold), redrawn as
    the percentage moves; the line is ended on leaving, so the verdicts start on their own."""

    def __init__(self, export: IO[bytes]) -> None:
        self.export = export
        self.shown = sys.stderr.isatty()
        status = os.fstat(export.fileno())
        self.size = status.st_size if stat.S_ISREG(status.st_mode) else 0  # a pipe: unknown
        self.read = 0
        self.drawn = -1

    def __enter__(self) -> Iterator[bytes]:
        return self._lines()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.shown:
            print(f"\r{self._status()}", file=sys.stderr, flush=True)

    def _lines(self) -> Iterator[bytes]:
        for line in self.export:
            self.read += len(line)
            if self.shown and self._mark() != self.drawn:
                self.drawn = self._mark()
                print(f"\r{self._status()}", end="", file=sys.stderr, flush=True)
            yield line.rstrip(b"\n")

    def _mark(self) -> int:
        """The percentage read, or with no known size the MiB read."""
        return 100 * self.read // self.size if self.size else self.read >> 20

    def _status(self) -> str:
        if self.size:
            return f"verifying: {self._mark():3d}% of {self.size:,} bytes"
        return f"verifying: {self._mark():,} MiB read"


def _witnessed(report: Report) -> str:
    witnesses = report.witnesses
    if not witnesses.witnesses:
        return "not checked: --no-witnesses given"
    names = ", ".join(sorted(report.cosigned_by))
    whose = (
        f"the {len(witnesses.witnesses)} witnesses the export names"
        if report.named
        else f"{len(witnesses.witnesses)} trusted witnesses"
    )
    fresh = (
        f", each within {witnesses.max_age} s of "
        + ("now" if witnesses.as_of is None else str(witnesses.as_of))
        if witnesses.max_age is not None
        else ""
    )
    return (
        f"OK  cosigned by {len(report.cosigned_by)} of {whose} ({names}), "
        f"{witnesses.quorum} required{fresh}"
    )


def _known_checkpoints(parser: argparse.ArgumentParser, files: list[Path]) -> list[KnownCheckpoint]:
    known = []
    for path in files:
        try:
            known.append(KnownCheckpoint(str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"--known-checkpoint {path}: {exc}")
    return known


if __name__ == "__main__":
    raise SystemExit(main())
