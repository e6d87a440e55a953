"""The ledger's HTTP API, kept with the ledger: it serves any log and knows no tenants or keys."""
