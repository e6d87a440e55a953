"""The refund scenario's findings: the seed's four, write-ahead attestation, and its better /
equal / worse. Each is a small function over the counted rows; the fixed text is in
text/refund.toml, every number is computed from the cells."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from experiments.kit.cells import Cell
from experiments.scenarios.refund import GATE_ROWS, TEXT, Refunds
from experiments.scenarios.refund_world import ATTESTED_MAX_INFLIGHT, EVIDENCE_WINDOW

Rows = dict[str, Refunds]
WAITING_ROWS = ("gate_tier2", "gate_tier2_stripe", "gate_tier3_notary", "interlock_attested")


def gates(r: Rows) -> list[Refunds]:
    return [row for name, row in r.items() if name in GATE_ROWS]


def baselines(r: Rows) -> list[Refunds]:
    return [row for name, row in r.items() if name not in GATE_ROWS]


def moved(rows: list[Refunds]) -> list[Cell]:
    """Cells where the lease was revoked or support refunded before the agent's refund."""
    return [
        c
        for row in rows
        for c in row.cells
        if c.fault.endswith(("lease_revoked", "refunded_by_hand"))
        and c.truth["agent_refunds_before_change"] == 0
    ]


def exactly_once(r: Rows) -> str | None:
    """1. Exactly-once belongs to the target."""
    if not gates(r):
        return None
    parts = [
        f"{row.name} {row.n - row.to_a_person}/{row.n} answered ({row.matches} matching the "
        f"service, {row.contradicts} contradicting it), {row.to_a_person} AMBIGUOUS"
        for row in gates(r)
    ]
    text = TEXT("once", parts="; ".join(parts), doubles=sum(row.doubles for row in gates(r)))
    if "plain_retry" in r:
        text += f", against {r['plain_retry'].doubles}/{r['plain_retry'].n} for plain_retry"
    text += "."
    tier1, tier3 = r.get("gate_tier1"), r.get("gate_tier3")
    if tier1 is not None and tier1.to_a_person:
        text += TEXT.then("once_tier1", n=tier1.to_a_person)
    if tier3 is not None:
        unpaid = tier3.count(
            lambda c: c.crash_to_settled_seconds is None and not c.truth["agent_refunds"]
        )
        text += TEXT.then("once_tier3", n=tier3.to_a_person, none=unpaid, unpaid=tier3.unpaid)
    return text


def keys_insufficient(r: Rows) -> str | None:
    """2. Keys are necessary and insufficient."""
    keys = r.get("idempotency_keys")
    if keys is None:
        return None
    crash_only = [c for c in keys.cells if c.fault.endswith("+none")]
    plain = f" (plain_retry: {r['plain_retry'].doubles})" if "plain_retry" in r else ""
    text = TEXT(
        "keys",
        doubles=keys.doubles,
        n=keys.n,
        plain=plain,
        held=sum(c.held for c in crash_only),
        crash_only=len(crash_only),
        revoked=keys.after_change("lease_revoked"),
        by_hand=keys.after_change("refunded_by_hand"),
        thirty=keys.thirty,
    )
    replayed = keys.count(
        lambda c: c.fault.endswith("redecided_30") and c.answer_vs_truth == "contradicts"
    )
    if replayed:
        text += TEXT.then("keys_replayed", n=replayed)
    stripe_keys = r.get("idempotency_keys_stripe")
    if stripe_keys is not None:
        text += TEXT.then("keys_stripe", doubles=stripe_keys.doubles, n=stripe_keys.n)
    return text


def recovery(r: Rows) -> str | None:
    """3. Recovery is when the world moves."""
    cells = moved(gates(r))
    if not cells:
        return None
    text = TEXT(
        "recovery",
        n=len(cells),
        acted=sum(1 for c in cells if c.truth["agent_refunds"]),
        refused=sum(1 for c in cells if c.answer.startswith("REFUSED")),
        ambiguous=sum(1 for c in cells if c.crash_to_settled_seconds is None),
    )
    same = moved(baselines(r))
    if same:
        acted = sum(1 for c in same if c.truth["agent_refunds"])
        text += f" The baselines refunded in {acted}/{len(same)} of the same cells."
    durable = r.get("durable_execution")
    if durable is not None:
        text += TEXT.then(
            "recovery_durable",
            thirty=durable.thirty,
            revoked=durable.after_change("lease_revoked"),
            by_hand=durable.after_change("refunded_by_hand"),
            doubles=durable.doubles,
        )
    return text


def notary_adds(r: Rows) -> str | None:
    """4. What the notary adds."""
    notary, tier3 = r.get("gate_tier3_notary"), r.get("gate_tier3")
    if notary is None:
        return None
    text = TEXT(
        "notary",
        person=notary.to_a_person,
        n=notary.n,
        tier3=f" (gate_tier3: {tier3.to_a_person}/{tier3.n})" if tier3 is not None else "",
        evidence=notary.starts("COMMITTED_ON_EVIDENCE"),
        window=int(EVIDENCE_WINDOW.total_seconds()),
        silent=notary.starts("AMBIGUOUS"),
        resent=notary.starts("COMMITTED_BY_RETRY"),
        proves=notary.proves,
    )
    if notary.median() is not None:
        text += f" Crash to settled: {notary.seconds()}, the webhook's delay."
    return text


def _dispatched_at(cell: Cell) -> list[float]:
    return [e["at"] for e in cell.detail.get("entries", []) if e["kind"] == "DISPATCHED"]


def _died_unanswered(cell: Cell) -> bool:
    """The first worker died after the service refunded, before it recorded anything."""
    late = ("after_target_acted", "after_response")
    return cell.exit_codes[0] == -9 and cell.detail["crash_point"] in late


def attested(r: Rows) -> str | None:
    """5. What write-ahead attestation did, from the interlock_attested cells."""
    row = r.get("interlock_attested")
    if row is None:
        return None
    once = [
        c
        for c in row.cells
        if len(c.truth["agent_refunds"]) == 1 and c.answer_vs_truth == "matches"
    ]
    refused = row.count(
        lambda c: c.answer.startswith("REFUSED") and not c.truth["agent_refunds"] and c.held
    )
    ambiguous = [c for c in row.cells if c.crash_to_settled_seconds is None]
    other = row.n - len(once) - refused
    text = TEXT(
        "attested",
        once=len(once),
        n=row.n,
        refused=refused,
        other=f", {other} otherwise" if other else "",
        doubles=row.doubles,
        contradicts=row.contradicts,
        ambiguous=len(ambiguous),
    )
    if ambiguous:
        intent_only = sum(
            1
            for c in ambiguous
            if [a["outcome"] for a in c.detail.get("attested", [])] == ["intent"]
        )
        text += TEXT.then("attested_intent", n=intent_only)
    return text + _attested_resends(row, once) + _attested_elsewhere(row, r)


def _attested_resends(row: Refunds, once: list[Cell]) -> str:
    text = ""
    resent = [c for c in row.cells if len(_dispatched_at(c)) > 1]
    if resent:
        gap = min(b - a for c in resent for a, b in itertools.pairwise(_dispatched_at(c)))
        text += TEXT(
            "attested_resent",
            n=len(resent),
            once=sum(len(c.truth["agent_refunds"]) == 1 for c in resent),
            gap=gap,
            inflight=ATTESTED_MAX_INFLIGHT.total_seconds(),
        )
    unanswered = [c for c in once if _died_unanswered(c)]
    answered = [c for c in once if not _died_unanswered(c)]
    text += TEXT(
        "attested_unanswered",
        n=len(unanswered),
        evidence=sum(c.answer.startswith("COMMITTED_ON_EVIDENCE") for c in unanswered),
        resent=sum(len(_dispatched_at(c)) > 1 for c in unanswered),
    )
    if answered:
        own = sum(not c.answer.startswith("COMMITTED_ON_EVIDENCE") for c in answered)
        text += TEXT("attested_answered", n=len(answered), own=own, notary=len(answered) - own)
    return text


def _attested_elsewhere(row: Refunds, r: Rows) -> str:
    compared = [
        f"{other.name} {other.to_a_person}/{other.n}"
        for other in (r.get("gate_tier3"), r.get("gate_tier3_notary"))
        if other is not None
    ]
    text = "." + (f" Left to a person elsewhere: {', '.join(compared)}." if compared else "")
    return text + TEXT.then("attested_silence", proves=row.proves, n=row.n)


def world_and_answers(r: Rows) -> list[str]:
    """Better, equal, worse: the world, then the answers and the record."""
    if not (gates(r) and baselines(r)):
        return []
    better = "better" if all(row.violations == 0 for row in gates(r)) else "mixed"
    violated = ", ".join(f"{row.name} {row.violations}/{row.n}" for row in baselines(r))
    return [
        f"**World: {better}.** Cells not as wanted: {sum(row.violations for row in gates(r))} in "
        f"{sum(row.n for row in gates(r))} gate cells; {violated} for the baselines.",
        TEXT(
            "answers",
            contradicts=", ".join(f"{row.name} {row.contradicts}" for row in r.values()),
            proves=", ".join(f"{row.name} {row.proves}/{row.n}" for row in r.values()),
        ),
    ]


def time_taken(r: Rows) -> str | None:
    """Time: equal where the gate can resend, worse where it must wait."""
    plain, tier1 = r.get("plain_retry"), r.get("gate_tier1")
    if plain is None or tier1 is None or tier1.median() is None:
        return None
    verdict = "equal" if (tier1.median() or 0.0) <= (plain.median() or 0.0) * 1.5 else "worse"
    waits = [
        f"{name} {r[name].seconds()}"
        for name in WAITING_ROWS
        if name in r and r[name].median() is not None
    ]
    return TEXT(
        "time",
        verdict=verdict,
        tier1=tier1.seconds(),
        plain=plain.seconds(),
        waits=TEXT("time_waits", waits=", ".join(waits)) + " " if waits else "",
    )


def availability(r: Rows) -> str | None:
    """Availability: worse; the cells left to a person and the refunds left unpaid."""
    if not gates(r):
        return None
    person = "; ".join(
        f"{row.name}: {row.to_a_person} cells to a person, {row.unpaid} approved refund(s) unpaid"
        for row in gates(r)
    )
    scoped = [
        c
        for row in gates(r)
        for c in row.cells
        if c.fault.endswith("redecided_30") and "lease_scope" in c.answer
    ]
    where = ", ".join(sorted({c.fault.split("+")[0] for c in scoped}))
    refused = TEXT("availability_scoped", n=len(scoped), where=where) if scoped else ""
    return TEXT("availability", person=person, refused=refused)


def tier1_goal(r: Rows) -> str | None:
    tier1 = r.get("gate_tier1")
    if tier1 is None or tier1.median() is None:
        return None
    median = tier1.median() or 0.0
    return (
        f"**Tier-1 goal.** Crash to settled median {median:.2f} s over "
        f"{len(tier1.settled())} settled cells (max {max(tier1.settled()):.2f} s): the goal "
        f"of under 1 s is {'met' if median < 1 else 'NOT met'}. Violations in gate rows: "
        + ", ".join(f"{row.name} {row.violations}" for row in gates(r))
        + "."
    )


FINDINGS: tuple[Callable[[Rows], str | None], ...] = (
    exactly_once, keys_insufficient, recovery, notary_adds, attested,
)  # fmt: skip
LAST: tuple[Callable[[Rows], str | None], ...] = (time_taken, availability, tier1_goal)


def findings(r: Rows) -> list[str]:
    """The seed's four findings and its better / equal / worse, every number from the cells."""
    out = [text for finding in FINDINGS if (text := finding(r)) is not None]
    out += world_and_answers(r)
    return out + [text for finding in LAST if (text := finding(r)) is not None]
