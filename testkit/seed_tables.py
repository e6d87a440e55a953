"""The seed's published email table (seeds/001_a99f3ec332b21d5e.txt): a fixed point the gate
must reproduce, in process and across real SIGKILLs alike."""

from __future__ import annotations

# (system, fault) -> (final state, emails the service sent), as published.
SEED_EMAIL_TABLE = {
    ("interlock", "crash_after_send"): ("COMMITTED_BY_RETRY", 1),
    ("interlock", "refused_before_send"): ("REFUSED:stale_premise_at_recovery", 0),
    ("interlock", "refused_after_send"): ("COMMITTED_ON_QUERY", 1),
    ("interlock_noprobe", "crash_after_send"): ("COMMITTED_BY_RETRY", 1),
    ("interlock_noprobe", "refused_before_send"): ("AMBIGUOUS", 0),
    ("interlock_noprobe", "refused_after_send"): ("AMBIGUOUS", 1),
    ("interlock_tier3", "crash_after_send"): ("AMBIGUOUS", 1),
    ("interlock_tier3", "refused_before_send"): ("AMBIGUOUS", 0),
    ("interlock_tier3", "refused_after_send"): ("AMBIGUOUS", 1),
}
