"""Receipts exported for auditors, who verify them offline (`python -m gate_client.verify`).

The format, interlock-receipts-export/v3, is JSON Lines, one object a line:

- `header`: the log's origin, one signed checkpoint (a C2SP signed note) of size N, the hashes
  of the tree's subtrees of 2**height entries (ledger.core.subtrees: they fold into the signed
  root), the range the export covers, [0, N), the filter, and the vkeys the notary publishes.
  The auditor trusts only the vkeys it was given; the verifier still requires the export's own
  to verify the checkpoint, and every receipt line to match the filter.
- `receipt` lines, in ascending effect id: the receipt as of the checkpoint, and every entry it
  derives from in seq order, each `{"entry": <its leaf as a JSON value>, "proof": <its hashes
  within its subtree, joined, in base64>}` (the checkpoint and the subtrees are the header's).
  An effect's own entries live here, each without its `effect_id`, which is the line's; its
  lease's entries come along as copies, or as their bare seq when one of the CITE_WINDOW
  receipt lines before carried them (gate_client.export_format: what the bytes of a carried
  value are, and what the verifier keeps to read a citation).
- `entry` lines, in ascending seq: every other entry of the range (leases, effects the filter
  left out), `{"type": "entry", "entry": ..., "proof": ...}` with its effect id. So each seq
  of the range has exactly one home, and an auditor can tell that nothing was left out.
- `footer`: how many receipt and entry lines came before it.

On request (`tlog_proofs`), the export is interlock-receipts-export/v1 instead: no subtrees in
the header, each entry's bytes in base64 (`leaf`) and its proof a whole C2SP tlog-proof against
the checkpoint, which any tlog-proof verifier checks alone.

It is produced as a stream, a chunk of effects at a time, so its memory does not grow with the
log (beyond one bit per entry, to know which entries a receipt line already carried, and the
lease entries the last CITE_WINDOW receipt lines carried). Its
progress is counted in entries given their line, of the checkpoint's size: exact from the
header on, whatever the filter leaves out.

Nothing is written that the verifier would refuse: the checkpoint must open under the published
keys, and every entry is proved in its tree before its line is written. A database altered
under the ledger (an entry, a node or the checkpoint changed, an entry missing) stops the export
with ExportDamaged, naming what is wrong, instead of a traceback or an export that lies."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings

from gate_client.export_format import (
    CITE_WINDOW,
    EXPORT_FORMAT,
    TLOG_PROOF_FORMAT,
    carried_text,
)
from gate_client.protocol import AT_RECOVERY, REFUSAL_REASONS, FinalState, State
from gate_client.receipts import ReceiptError, derive_receipt
from ledger.core.checkpoint import Checkpoint as SignedTree
from ledger.core.checkpoint import (
    CheckpointError,
    log_verifier,
    open_checkpoint,
    parse_tlog_proof,
)
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import EntryError, format_timestamp
from ledger.core.merkle import (
    ProofError,
    hashes_for_ranges,
    leaf_hash,
    nodes_for_ranges,
    range_hash,
    verify_inclusion,
)
from ledger.core.note import parse_vkey
from ledger.core.subtrees import (
    inner_inclusion_ranges,
    root_of_subtrees,
    subtree_ranges,
    verify_in_subtree,
)
from ledger.keys import configured_witness_keys
from ledger.models import Checkpoint, Entry, Log
from ledger.selectors import (
    LedgerLookupError,
    entries_at,
    fetch_nodes,
    latest_checkpoint,
    log_verifiers,
    published_checkpoint,
    signing_keys,
    tlog_proofs,
    trusted_cosigners,
)
from notary.errors import NotaryConflict, NotaryInputError
from notary.models import Effect, Lease, Tenant

# Entries per subtree the header states, as 2**height: each proof is `height` hashes, the
# header a hash per 2**height entries (2 bytes an entry at 4, next to the verifier's one bit).
SUBTREE_HEIGHT = 4
_CHUNK = 500
# What reading an altered database can raise: a row that is not an entry, a node that is gone.
_DAMAGE = (EntryError, ReceiptError, ProofError, LedgerLookupError, KeyError, ValueError)
# Called as each line is made: how many of the range's entries have their line so far, of how
# many (the checkpoint's size); the header reports (0, size).
Progress = Callable[[int, int], None]


class ExportDamaged(NotaryConflict):
    """The ledger's rows do not prove what the export would say: nothing more is written."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            "ledger_damaged", f"{detail}: the ledger's database was altered; run verify_ledger"
        )


def export_receipts(
    *,
    tenant: Tenant,
    since: datetime | None = None,
    until: datetime | None = None,
    state: str | None = None,
    progress: Progress | None = None,
    tlog_proofs: bool = False,
) -> Iterator[str]:
    """The export's lines (each ending in a newline) for the effects proposed in [since, until)
    whose state as of the published checkpoint (the latest signed one with the cosignatures the
    log requires, which the header carries) is `state` (a prefix when it ends in `*`); with
    `tlog_proofs`, in v1, each entry with a whole C2SP tlog-proof.

    A state no receipt can end in is refused (NotaryInputError) before anything is read, and
    a log with no published checkpoint with NotaryConflict("no_checkpoint"), saying why."""
    if state is not None:
        check_state_filter(state)
    log = tenant.log
    checkpoint = published_checkpoint(log=log)
    if checkpoint is None:
        raise NotaryConflict("no_checkpoint", unpublished(tenant))
    report = progress or _unobserved
    prover = _Prover.of(checkpoint, tlog=tlog_proofs)
    end = checkpoint.size
    yield _line(
        {
            "type": "header",
            "format": TLOG_PROOF_FORMAT if tlog_proofs else EXPORT_FORMAT,
            "origin": log.origin,
            "checkpoint": checkpoint.published_note,
            **prover.header(),
            "vkeys": [log_verifier(log.origin, parse_vkey(k.vkey)).vkey for k in signing_keys()],
            # Whose cosignatures the checkpoint carries, and how many the notary requires: what
            # the verifier checks unless the auditor names the witnesses it trusts.
            "witnesses": {
                "vkeys": [w.vkey for w in configured_witness_keys()],
                "quorum": settings.LEDGER_COSIGNATURE_QUORUM,
            },
            "range": {"first": 0, "end": end},
            "filter": {
                "from": format_timestamp(since) if since else None,
                "to": format_timestamp(until) if until else None,
                "state": state,
            },
        }
    )
    report(0, end)
    carried = bytearray(end)  # 1 where a receipt line is the entry's home
    effects = Effect.objects.filter(tenant=tenant, proposed_seq__lt=end)
    if since is not None:
        effects = effects.filter(proposed_at__gte=since)
    if until is not None:
        effects = effects.filter(proposed_at__lt=until)
    ids = effects.order_by("effect_id").values_list("effect_id", "lease_id")
    receipts = entries = homed = 0
    cited = _Citations(enabled=not tlog_proofs)
    try:
        for chunk in _chunks(ids.iterator(chunk_size=_CHUNK), _CHUNK):
            for line, own in _receipt_lines(tenant, prover, chunk, state, carried, cited):
                receipts += 1
                homed += own
                report(homed, end)
                yield line
        for line in _entry_lines(tenant, prover, carried):
            entries += 1
            report(homed + entries, end)
            yield line
    except _DAMAGE as exc:
        raise ExportDamaged(f"log {log.origin}: {exc}") from exc
    yield _line({"type": "footer", "receipts": receipts, "entries": entries})


def _unobserved(done: int, total: int) -> None:
    """No one watches this export's progress."""


def unpublished(tenant: Tenant) -> str:
    """Why the tenant's log has no published checkpoint to export, and what gives it one."""
    log = tenant.log
    required = settings.LEDGER_COSIGNATURE_QUORUM
    latest = latest_checkpoint(log=log)
    if latest is None:
        witnessed = f", and cosigned by the {required} witnesses it requires" if required else ""
        return (
            f"log {log.origin} has no signed checkpoint yet: the notary's beat signs one every "
            "NOTARY_CHECKPOINT_INTERVAL_SECONDS, or its operator at once with "
            f"`manage.py sign_checkpoint --log {log.origin}`; export again once one is "
            f"signed{witnessed}"
        )
    cosigned = trusted_cosigners(checkpoint=latest)
    configured = len(configured_witness_keys())
    short = f" (only {configured} configured)" if configured < required else ""
    return (
        f"log {log.origin} publishes a checkpoint only once {required} of its witnesses "
        f"(LEDGER_WITNESSES) cosigned it (LEDGER_COSIGNATURE_QUORUM), and none is yet: its "
        f"latest, of size {latest.size}, is verifiably cosigned by {cosigned}{short}. Each "
        "checkpoint is sent to the witnesses once signed, and again on the notary's beat: check "
        "that they run and are reachable, then export again"
    )


def _final_states() -> list[str]:
    """The final states a receipt can have, as it writes them (protocol.FinalState); FAILED's
    goes on with the failure code, so it is here as its prefix, "FAILED:"."""
    states = []
    for state in State:
        if state is State.REFUSED:
            states += [
                str(FinalState(state, reason, again))
                for reason in sorted(REFUSAL_REASONS)
                for again in (False, True)
            ]
        else:
            states.append(str(FinalState(state)))
    return states


_FINAL_STATES = _final_states()
_FAILED = str(FinalState(State.FAILED))


def check_state_filter(state: str) -> None:
    """Refuse a state filter no receipt's final state can match (lower case, a typo, FAILED
    without its code): its export would be empty, which reads as an answer."""
    if _selects_some(state):
        return
    name, colon, rest = state.partition(":")
    fixed = name.upper() + colon + rest
    guesses = [g for g in (fixed, fixed.rstrip("*") + "*") if g != state and _selects_some(g)]
    hint = f" (did you mean {guesses[0]}?)" if guesses else ""
    states = ", ".join(
        f"{s}:<code>"
        if s is State.FAILED
        else f"{s}:<reason>[{AT_RECOVERY}]"
        if s is State.REFUSED
        else str(s)
        for s in State
    )
    raise NotaryInputError(
        f"state {state!r} is no receipt's final state{hint}: give one of {states} (a REFUSED "
        f"reason is one of {', '.join(sorted(REFUSAL_REASONS))}), or a prefix ending in *, "
        "e.g. COMMITTED* or FAILED*"
    )


def _selects_some(state: str) -> bool:
    """Whether some receipt's final state is `state` (starts with it, for a prefix)."""
    if state.endswith("*"):
        prefix = state[:-1]
        return prefix.startswith(_FAILED) or any(s.startswith(prefix) for s in _FINAL_STATES)
    return state != _FAILED and (state.startswith(_FAILED) or state in _FINAL_STATES)


def _signed_tree(checkpoint: Checkpoint) -> SignedTree:
    """The tree the stored checkpoint signs, opened under the published keys."""
    log = checkpoint.log
    try:
        tree = open_checkpoint(checkpoint.published_note, log_verifiers(log=log), origin=log.origin)
    except CheckpointError as exc:
        detail = f"the checkpoint of {log.origin} at size {checkpoint.size}: {exc}"
        raise ExportDamaged(detail) from exc
    if tree.size != checkpoint.size:
        raise ExportDamaged(f"the checkpoint stored at size {checkpoint.size} signs {tree.size}")
    return tree


class _Prover:
    """The entries' proofs in the export's form, each checked before its line is written:
    within its subtree, against the subtree hashes the header states (checked against the
    signed root once), or with `tlog` a whole C2SP tlog-proof against the checkpoint."""

    def __init__(self, checkpoint: Checkpoint, tree: SignedTree, subtrees: bytes | None) -> None:
        self.checkpoint = checkpoint
        self.log: Log = checkpoint.log
        self.tree = tree
        self.subtrees = subtrees

    @classmethod
    def of(cls, checkpoint: Checkpoint, *, tlog: bool) -> _Prover:
        tree = _signed_tree(checkpoint)
        if tlog:
            return cls(checkpoint, tree, None)
        ranges = subtree_ranges(tree.size, SUBTREE_HEIGHT)
        try:
            nodes = fetch_nodes(log=checkpoint.log, node_ids=nodes_for_ranges(ranges))
            hashes = [range_hash(start, end, nodes) for start, end in ranges]
        except _DAMAGE as exc:
            raise ExportDamaged(f"log {tree.origin}: the tree's subtrees: {exc}") from exc
        if root_of_subtrees(hashes) != tree.root:
            raise ExportDamaged(
                f"the subtrees of {tree.origin} do not make the root signed at size {tree.size}"
            )
        return cls(checkpoint, tree, b"".join(hashes))

    def header(self) -> dict[str, Any]:
        if self.subtrees is None:
            return {}
        joined = base64.b64encode(self.subtrees).decode("ascii")
        return {"subtrees": {"height": SUBTREE_HEIGHT, "hashes": joined}}

    def proofs(self, seqs: Iterable[int]) -> dict[int, Any]:
        """The proofs of these entries, from one query for the nodes they need."""
        if self.subtrees is None:
            return tlog_proofs(log=self.log, indexes=seqs, checkpoint=self.checkpoint)
        size = self.tree.size
        ranges = {seq: inner_inclusion_ranges(seq, size, SUBTREE_HEIGHT) for seq in seqs}
        needed = set().union(*(nodes_for_ranges(r) for r in ranges.values()))
        nodes = fetch_nodes(log=self.log, node_ids=needed)
        return {seq: hashes_for_ranges(path, nodes) for seq, path in ranges.items()}

    def item(self, entry: LedgerEntry, proofs: dict[int, Any], *, own_effect: str = "") -> str:
        """The entry as a line carries it (JSON), once its bytes are proved in the signed tree;
        `own_effect` is the receipt line's effect id when the entry is that effect's."""
        leaf = entry.leaf_bytes()
        proof = proofs[entry.seq]
        tree = self.tree
        try:
            if self.subtrees is None:
                verify_inclusion(
                    leaf_hash=leaf_hash(leaf),
                    index=entry.seq,
                    size=tree.size,
                    proof=parse_tlog_proof(proof).hashes,
                    root=tree.root,
                )
            else:
                verify_in_subtree(
                    leaf_hash=leaf_hash(leaf),
                    index=entry.seq,
                    size=tree.size,
                    height=SUBTREE_HEIGHT,
                    proof=proof,
                    subtree_hashes=self.subtrees,
                )
                proof = base64.b64encode(b"".join(proof)).decode("ascii")
        except (ProofError, CheckpointError) as exc:
            raise ExportDamaged(
                f"entry {entry.seq} of {tree.origin} is not in the tree signed at size "
                f"{tree.size} ({exc})"
            ) from exc
        if self.subtrees is None:
            return _json(
                {"seq": entry.seq, "leaf": base64.b64encode(leaf).decode("ascii"), "proof": proof}
            )
        # The leaf is canonical JSON, so it is spliced in as it is: nothing is encoded again.
        return f'{{"entry":{carried_text(leaf, own_effect=own_effect)},"proof":"{proof}"}}'


def _entry_lines(tenant: Tenant, prover: _Prover, carried: bytearray) -> Iterator[str]:
    """The seqs no receipt line carried; only their bodies are read again."""
    log = tenant.log
    uncarried = (seq for seq in range(prover.tree.size) if not carried[seq])
    for seqs in _chunks(uncarried, 2000):
        homeless = entries_at(log=log, seqs=seqs)
        if len(homeless) != len(seqs):
            found = {e.seq for e in homeless}
            gone = [seq for seq in seqs if seq not in found]
            raise ExportDamaged(f"entries {gone[:10]} of {log.origin} are not stored")
        proofs = prover.proofs(seqs)
        for entry in homeless:
            yield '{"type":"entry",' + prover.item(entry, proofs)[1:] + "\n"


def _receipt_lines(
    tenant: Tenant,
    prover: _Prover,
    chunk: list[tuple[str, str]],
    state: str | None,
    carried: bytearray,
    cited: _Citations,
) -> Iterator[tuple[str, int]]:
    """The chunk's receipt lines that match `state`, each with how many of its entries are its
    effect's own (the entries it is the home of); an entry of another (a lease's) is cited by
    its seq where `cited` allows."""
    log, end = tenant.log, prover.tree.size
    histories: dict[str, list[LedgerEntry]] = {effect_id: [] for effect_id, _ in chunk}
    rows = Entry.objects.filter(log=log, effect_id__in=list(histories), seq__lt=end)
    for row in rows.order_by("seq"):
        histories[row.effect_id].append(row.as_ledger_entry())
    leases = Lease.objects.filter(tenant=tenant, lease_id__in={lease for _, lease in chunk})
    seqs = [s for lease in leases for s in (lease.granted_seq, lease.revoked_seq) if s is not None]
    by_seq = {e.seq: e for e in entries_at(log=log, seqs=[s for s in seqs if s < end])}
    lease_entries = {
        lease.lease_id: [
            by_seq[s] for s in (lease.granted_seq, lease.revoked_seq) if s is not None and s < end
        ]
        for lease in leases
    }
    lines = []
    for effect_id, lease_id in chunk:
        journal = sorted([*histories[effect_id], *lease_entries.get(lease_id, [])], key=_seq)
        receipt = derive_receipt(journal, effect_id)
        if state is not None and not _matches(receipt.final_state, state):
            continue
        for entry in histories[effect_id]:
            carried[entry.seq] = 1
        lines.append((effect_id, receipt.to_dict(), journal))
    lines_cited = [(line, cited.of_line(line[0], line[2])) for line in lines]
    proofs = prover.proofs(
        {e.seq for (_, _, journal), refs in lines_cited for e in journal if e.seq not in refs}
    )
    for (effect_id, receipt_fields, journal), refs in lines_cited:
        items = ",".join(
            str(e.seq)
            if e.seq in refs
            else prover.item(e, proofs, own_effect=effect_id if e.effect_id == effect_id else "")
            for e in journal
        )
        text = (
            f'{{"type":"receipt","effect_id":{_json(effect_id)},'
            f'"receipt":{_json(receipt_fields)},"entries":[{items}]}}\n'
        )
        yield text, len(histories[effect_id])


class _Citations:
    """Which entries of other effects (a lease's) a receipt line may cite by seq: those one of
    the CITE_WINDOW receipt lines before it carried, as the verifier keeps them. Not in v1,
    whose entries each stand alone."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.line = 0  # receipt lines so far
        self.carried_on: dict[int, int] = {}  # seq -> the receipt line that last carried it

    def of_line(self, effect_id: str, journal: Iterable[LedgerEntry]) -> set[int]:
        """The next receipt line's cited seqs; the others of other effects count as carried."""
        self.line += 1
        if not self.enabled:
            return set()
        if self.line % CITE_WINDOW == 0:  # forget what no line from here may cite
            self.carried_on = {
                seq: line
                for seq, line in self.carried_on.items()
                if self.line - line <= CITE_WINDOW
            }
        refs = set()
        for entry in journal:
            if entry.effect_id == effect_id:
                continue
            line = self.carried_on.get(entry.seq)
            if line is not None and self.line - line <= CITE_WINDOW:
                refs.add(entry.seq)
            else:
                self.carried_on[entry.seq] = self.line
        return refs


def _matches(final_state: str, wanted: str) -> bool:
    if wanted.endswith("*"):
        return final_state.startswith(wanted[:-1])
    return final_state == wanted


def _seq(entry: LedgerEntry) -> int:
    return entry.seq


def _line(record: dict[str, Any]) -> str:
    return _json(record) + "\n"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
