"""The email scenario's findings, each a small function over the cells: emails, answers against
each hand check, the notary row, record, time, availability, the seed's pairs and the timing of
the refused faults. The fixed text is in text/email.toml; every number comes from the cells."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from experiments.kit.cells import Cell, Scenario
from experiments.kit.prose import listing
from experiments.kit.stats import median
from experiments.scenarios.email import GATES, TEXT
from experiments.scenarios.email_world import EVIDENCE_WINDOW, WITHHELD
from experiments.workers import email_worker
from testkit.agents import email_agent

KIND_WORDS = {
    "matches": "matches Resend",
    "cannot know (said so)": "cannot know, and says so",
    "contradicts": "contradicts Resend",
}
PAIRS = (
    ("hand_check", "interlock"),
    ("hand_check_noprobe", "interlock_noprobe"),
    ("hand_check_noprobe", "interlock"),
    ("interlock_tier3", "interlock_notary"),
)
WINDOW = f"{EVIDENCE_WINDOW.total_seconds():.0f}"
TIMEOUT = f"{email_agent.TIMEOUT.total_seconds():.0f}"


def median_of_present(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


def spread(values: Iterable[float | None]) -> str:
    present = sorted(v for v in values if v is not None)
    if not present:
        return "none settled"
    low, high = present[0], present[-1]
    return f"{low:.1f}s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}s"


def main_cells(scenario: Scenario) -> list[Cell]:
    return [c for c in scenario.cells if c.system in scenario.systems]


def systems_run(scenario: Scenario) -> list[str]:
    return [s for s in scenario.systems if scenario.of(s)]


def differences(scenario: Scenario, a: str, b: str) -> list[str]:
    """Faults where the two left a different number of emails or gave a different answer."""
    found = []
    for fault in scenario.faults:
        x = next((c for c in scenario.of(a) if c.fault == fault), None)
        y = next((c for c in scenario.of(b) if c.fault == fault), None)
        if (
            x is not None
            and y is not None
            and (x.outcome, x.answer_vs_truth)
            != (
                y.outcome,
                y.answer_vs_truth,
            )
        ):
            found.append(fault)
    return found


def emails(scenario: Scenario) -> str:
    main = main_cells(scenario)
    faults = {c.fault for c in main}
    violated = [c for c in main if not c.held]
    rereaders = [s for s in systems_run(scenario) if s != "no_check"]
    clean = [s for s in rereaders if all(c.held for c in scenario.of(s))]
    sentence = (
        f"Emails: {'equal' if len(clean) == len(rereaders) else 'not equal'}. "
        f"{len(clean)} of the {len(rereaders)} systems that re-read the refund "
        f"({listing(rereaders)}) left Resend as wanted in every cell they ran "
        f"({sum(len(scenario.of(s)) for s in rereaders)} cells, {len(faults)} faults)."
    )
    gate_bad = [f"{c.system} / {c.fault}" for c in violated if c.system in GATES]
    if gate_bad:
        sentence += f" A GATE ROW VIOLATED: {listing(gate_bad)}."
    else:
        sentence += f" The gate rows: 0 violations in {sum(c.system in GATES for c in main)} cells."
    for c in violated:
        if c.system == "no_check":
            sentence += TEXT.then(
                "emails_no_check", fault=c.fault, outcome=c.outcome, wanted=c.wanted
            )
        elif c.system not in GATES:
            sentence += f" {c.system}, in {c.fault}, left {c.outcome} (want {c.wanted})."
    return sentence


def against_strongest(scenario: Scenario) -> str | None:
    if not scenario.ran("hand_check", "interlock"):
        return None
    diff = differences(scenario, "hand_check", "interlock")
    if not diff:
        return "Answers, against the strongest hand check: " + TEXT["strongest_equal"]
    hand, gate = ({f: scenario.cell(s, f) for f in diff} for s in ("hand_check", "interlock"))
    return (
        f"Answers, against the strongest hand check: they differ in {listing(diff)}: "
        + "; ".join(
            f"hand_check {hand[f].answer} ({hand[f].answer_vs_truth}) against interlock "
            f"{gate[f].answer} ({gate[f].answer_vs_truth})"
            for f in diff
        )
        + "."
    )


def against_idiomatic(scenario: Scenario) -> str | None:
    if not scenario.ran("hand_check_noprobe"):
        return None
    wrong = [c for c in scenario.of("hand_check_noprobe") if c.answer_vs_truth != "matches"]
    if not wrong:
        return TEXT["idiomatic_equal"]
    faults_wrong = [c.fault for c in wrong]
    by_kind: dict[str, list[str]] = {}
    for s in (s for s in GATES if scenario.ran(s)):
        kinds = {scenario.cell(s, f).answer_vs_truth for f in faults_wrong}
        by_kind.setdefault(kinds.pop() if len(kinds) == 1 else "mixed", []).append(s)
    told = "; ".join(
        f"hand_check_noprobe answered {c.answer} in {c.fault} while Resend holds "
        f"{c.outcome}: its answer and its log contradict Resend"
        for c in wrong
    )
    answered = "; ".join(
        listing(
            [
                f"{r} answered " + " / ".join(scenario.cell(r, f).answer for f in faults_wrong)
                for r in rows
            ]
        )
        + f" ({KIND_WORDS.get(kind, kind)})"
        for kind, rows in by_kind.items()
    )
    sentence = (
        "Answers, against the idiomatic hand check: "
        + ("Interlock better" if by_kind.get("matches") else "Interlock not better")
        + f". {told}. In the same fault"
        + ("s" if len(wrong) > 1 else "")
        + f": {answered}."
    )
    if "interlock_noprobe" in by_kind.get("cannot know (said so)", []):
        sentence += TEXT.then("idiomatic_documented")
    return sentence


def notary_row(scenario: Scenario) -> str | None:
    if not scenario.ran("interlock_notary"):
        return None
    notary = scenario.of("interlock_notary")
    matched = sum(c.answer_vs_truth == "matches" for c in notary)
    unknown = sum(c.answer_vs_truth == "cannot know (said so)" for c in notary)
    sentence = (
        f"The notary row: interlock_notary answered {matched}/{len(notary)} cells correctly "
        f"and left {unknown} for a person ({listing([f'{c.fault}: {c.answer}' for c in notary])}); "
        f"its records prove {sum(c.record_proves_it for c in notary)}/{len(notary)}."
    )
    if scenario.ran("interlock_tier3"):
        tier3 = scenario.of("interlock_tier3")
        t3_matched = sum(c.answer_vs_truth == "matches" for c in tier3)
        t3_unknown = sum(c.answer_vs_truth == "cannot know (said so)" for c in tier3)
        verdict = (
            "better" if matched > t3_matched else "equal" if matched == t3_matched else "worse"
        )
        sentence += (
            f" Against interlock_tier3, the same tier-3 declaration without evidence "
            f"({t3_matched}/{len(tier3)} answered, {t3_unknown} AMBIGUOUS): {verdict}."
        )
    evidence = [c for c in notary if c.answer == "COMMITTED_ON_EVIDENCE"]
    if evidence:
        after = seconds(median_of_present(c.crash_to_settled_seconds for c in evidence))
        sentence += TEXT.then("notary_evidence", seconds=after)
    for c in notary:
        if c.fault == "refused_before_send":
            sentence += TEXT.then("notary_silent", window=WINDOW, answer=c.answer)
    return sentence + TEXT.then("notary_adds")


def record(scenario: Scenario) -> str:
    proves = [
        f"{s} {sum(c.record_proves_it for c in scenario.of(s))}/{len(scenario.of(s))}"
        for s in systems_run(scenario)
    ]
    return "Record: " + listing(proves) + TEXT.then("record")


def hand_and_gates(scenario: Scenario) -> tuple[list[Cell], list[Cell]]:
    main = main_cells(scenario)
    return (
        [c for c in main if c.system in email_worker.HAND_SYSTEMS],
        [c for c in main if c.system in GATES],
    )


def time_finding(scenario: Scenario) -> str | None:
    """Crash to settled, fault by fault: within a fault every system faces the same outage."""
    hand, gates = hand_and_gates(scenario)
    if not (hand and gates):
        return None
    per_fault = []
    for fault in [f for f in scenario.faults if any(c.fault == f for c in hand + gates)]:
        mine_gates = [c for c in gates if c.fault == fault]
        unsettled = sum(c.crash_to_settled_seconds is None for c in mine_gates)
        per_fault.append(
            f"{fault}: hand-written "
            f"{spread(c.crash_to_settled_seconds for c in hand if c.fault == fault)}, "
            f"gates {spread(c.crash_to_settled_seconds for c in mine_gates)}"
            + (f" ({unsettled} AMBIGUOUS, never settled)" if unsettled else "")
        )
    later, early = compared_to_hand(hand, gates)
    text = f"Time: {time_word(later, early, gates)}. From the SIGKILL to a settled answer, "
    text += "; ".join(per_fault) + ". " + TEXT("time_includes") + " "
    if early:
        text += TEXT("time_early", cells=listing([f"{c.system} / {c.fault}" for c in early])) + " "
    if later:
        cells = [f"{c.system} / {c.fault} {seconds(c.crash_to_settled_seconds)}" for c in later]
        text += TEXT("time_later", cells=listing(cells), timeout=TIMEOUT, window=WINDOW) + " "
    else:
        text += TEXT("time_none_later", timeout=TIMEOUT, window=WINDOW) + " "
    for c in gates:
        waited = c.detail.get("first_dispatch_to_verdict_seconds")
        if (c.system, c.fault) == (
            "interlock_notary",
            "refused_before_send",
        ) and waited is not None:
            text += TEXT("time_silent", waited=waited) + " "
    return text + TEXT("time_ttl")


def compared_to_hand(hand: list[Cell], gates: list[Cell]) -> tuple[list[Cell], list[Cell]]:
    """The gate cells settled more than 0.5 s after the slowest, or before the fastest, hand
    cell of their fault."""
    times: dict[str, list[float]] = {}
    for c in hand:
        times.setdefault(c.fault, []).append(c.crash_to_settled_seconds or 0.0)
    settled = [c for c in gates if c.crash_to_settled_seconds is not None and c.fault in times]
    later = [c for c in settled if (c.crash_to_settled_seconds or 0) > max(times[c.fault]) + 0.5]
    early = [c for c in settled if (c.crash_to_settled_seconds or 0) < min(times[c.fault]) - 0.5]
    return later, early


def time_word(later: list[Cell], early: list[Cell], gates: list[Cell]) -> str:
    if later:
        word = "worse" + (f", though {len(early)} gate cell(s) settled sooner" if early else "")
    elif early:
        word = f"equal where both settle, and better in {len(early)} cell(s)"
    else:
        word = "equal where both settle"
    never = sum(c.crash_to_settled_seconds is None for c in gates)
    if never:
        word += f"; {never} gate cell(s) never settle (AMBIGUOUS, see Availability)"
    return word


def availability(scenario: Scenario) -> str:
    hand, _ = hand_and_gates(scenario)
    ambiguous = {
        s: sum(c.answer == "AMBIGUOUS" for c in scenario.of(s)) for s in systems_run(scenario)
    }
    if any(ambiguous.values()):
        counted = [f"{s} {n}/{len(scenario.of(s))}" for s, n in ambiguous.items() if n]
        wrong = sum(c.answer_vs_truth == "contradicts" for c in hand)
        sentence = "Availability: " + TEXT(
            "availability", cells=listing(counted), wrong=wrong, n=len(hand)
        )
    else:
        sentence = "Availability: no cell of this run ended AMBIGUOUS."
    return sentence + TEXT.then("availability_journal")


def pairs(scenario: Scenario) -> str | None:
    compared = [
        f"{a} vs {b}: {listing(differences(scenario, a, b)) or 'none'}"
        for a, b in PAIRS
        if scenario.ran(a, b)
    ]
    if not compared:
        return None
    return TEXT["pairs"] + " " + "; ".join(compared) + "."


def timing(scenario: Scenario) -> str | None:
    margins = [
        (c, c.detail["last_read_before_send"])
        for c in main_cells(scenario)
        if c.detail.get("last_read_before_send") is not None
    ]
    if not margins:
        return None
    closest = min(margins, key=lambda m: m[1]["failed_after_read_seconds"])
    gaps = [m[1]["failed_after_read_seconds"] for m in margins]
    return TEXT(
        "timing",
        discarded=sum(len(c.discarded_attempts) for c in scenario.cells),
        low=min(gaps),
        high=max(gaps),
        closest=f"{closest[0].system} / {closest[0].fault}",
    )


FINDINGS: tuple[Callable[[Scenario], str | None], ...] = (
    emails, against_strongest, against_idiomatic, notary_row, record, time_finding,
    availability, pairs, timing,
)  # fmt: skip


def findings(scenario: Scenario) -> list[str]:
    return [text for finding in FINDINGS if (text := finding(scenario)) is not None]


def withheld(scenario: Scenario) -> list[str]:
    """The notary row with the webhooks withheld: what it rests on."""
    cells = scenario.of(WITHHELD)
    if not cells:
        return []
    wrong = [c for c in cells if c.answer_vs_truth == "contradicts"]
    tier3_wrong = [c for c in scenario.of("interlock_tier3") if c.answer_vs_truth == "contradicts"]
    text = TEXT(
        "withheld",
        word="worse than" if len(wrong) > len(tier3_wrong) else "no worse than",
        wrong=len(wrong),
        tier3=len(tier3_wrong),
        answered=listing(
            [f"{c.fault}: {c.answer} ({c.outcome}, {c.answer_vs_truth})" for c in cells]
        ),
        window=WINDOW,
        ambiguous=sum(c.answer == "AMBIGUOUS" for c in cells),
        n=len(cells),
    )
    if wrong:
        text += " It is wrong in " + listing([c.fault for c in wrong]) + "."
    retried = [c.fault for c in cells if c.answer == "COMMITTED_BY_RETRY"]
    if retried:
        text += " In " + listing(retried) + " it resent, which a tier-3 declaration must never do."
    return [text + TEXT.then("withheld_late")]
