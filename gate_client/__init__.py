"""The gate the agent embeds: every side effect goes through it and comes out with a receipt.

Plain Python with no Django: it reuses the ledger core (`ledger.core`) for the canonical encoding,
entry hashing and chain, so a local journal and the notary's ledger hash the same bytes."""
