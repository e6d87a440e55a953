"""The ledger's plain-Python core: canonical encoding, entries, Merkle proofs, checkpoints, verify.

Nothing here imports Django, so the gate client and offline auditors reuse it as it is."""
