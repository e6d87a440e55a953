"""What the exporter (notary.exports) and the offline verifier (gate_client.verify) agree on in
a receipts export: the format names, and how v3 carries an entry and cites one carried before.

In v3 a carried entry is its leaf as a JSON value, not a string of its bytes (no escaping), and
an entry of the line's own effect leaves out its `effect_id`, which is the line's. Its bytes are
that value's canonical JSON with the effect id put back: the verifier hashes exactly those and
proves the hash in the signed tree, so a value that does not make the logged bytes is refused,
never read as another entry. An entry of another effect or of no effect (a lease's) keeps its
`effect_id` ("" for a lease's), and a receipt line may cite it by its seq instead of carrying it
again when one of the CITE_WINDOW receipt lines before it carried it: the verifier keeps those
entries only, so its memory does not grow with the export."""

from __future__ import annotations

from typing import Any

EXPORT_FORMAT = "interlock-receipts-export/v3"
SUBTREES_TEXT_FORMAT = "interlock-receipts-export/v2"  # still read: each entry as a string
TLOG_PROOF_FORMAT = "interlock-receipts-export/v1"  # each entry with a whole C2SP tlog-proof
# How many receipt lines back a cited entry may have been carried.
CITE_WINDOW = 4096


def carried_text(leaf: bytes, *, own_effect: str) -> str:
    """The entry's leaf as a v3 line carries it; `own_effect` is the line's effect id when the
    entry is that effect's (its `effect_id` is then left out), else ""."""
    if own_effect:
        # Canonical keys are sorted, so the envelope's fields follow the body: the last
        # `"effect_id":"<id>",` is the envelope's, whatever the body holds.
        field = b'"effect_id":"' + own_effect.encode("ascii") + b'",'
        at = leaf.rfind(field)
        if at < 0:
            raise ValueError(f"the entry is not {own_effect}'s")
        leaf = leaf[:at] + leaf[at + len(field) :]
    return leaf.decode("utf-8")


def carried_envelope(value: Any, *, line_effect: str) -> dict[str, Any]:
    """The entry a v3 line carries, as its whole envelope (ledger.core.entries.
    entry_from_envelope reads it): the line's effect id put back where the value leaves it out
    (entry lines have none, "")."""
    if not isinstance(value, dict):
        raise TypeError("a carried entry is not a JSON object")
    if "effect_id" not in value and line_effect:
        return {**value, "effect_id": line_effect}
    return value
