"""A transparency-log witness (C2SP tlog-witness, tlog-cosignature): its own process, its own
key, its own state file; it cosigns a log's checkpoint only when it is consistent with the latest
one it cosigned for that log. Plain Python: it shares ledger.core's notes and Merkle proofs and
nothing else of the notary."""
