"""The coding scenario's findings: the premise dial, symbols against file_hash case by case,
the floors, no premise, recovery, repetition and the races. The fixed text is in
text/coding.toml; every number comes from the cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from experiments.kit.cells import Scenario
from experiments.scenarios.coding import ORDERED, RACES, SYSTEMS, TEXT, Tally, tally, verdicts

Tallies = Mapping[str, Mapping[str, Tally]]


def side_by_side(by: Tallies, faults: Sequence[str]) -> tuple[str, tuple[list[str], list[str]]]:
    """symbols against file_hash per case: better, equal or worse, counting the cells where
    broken code landed plus the right edits refused; and (the better cases, the worse)."""
    verdict: dict[str, list[str]] = {"better": [], "equal": [], "worse": []}
    for fault in faults:
        sy, fh = by["symbols"][fault], by["file_hash"][fault]
        mine, theirs = sy.broken + sy.right_edits_refused, fh.broken + fh.right_edits_refused
        word = "equal" if mine == theirs else "better" if mine < theirs else "worse"
        verdict[word].append(
            f"{fault} (broken {sy.broken}/{sy.cells} vs {fh.broken}/{fh.cells}, right edits "
            f"refused {sy.right_edits_refused} vs {fh.right_edits_refused})"
        )
    text = "; ".join(f"{word} in {', '.join(cases)}" for word, cases in verdict.items() if cases)
    better = [c.split(" ")[0] for c in verdict["better"]]
    worse = [c.split(" ")[0] for c in verdict["worse"]]
    return text, (better, worse)


def dial(scenario: Scenario, by: Tallies) -> list[str]:
    """The dial, symbols against file_hash, the floors, no premise and recovery."""
    total = {s: tally(scenario.of(s, ORDERED)) for s in SYSTEMS}

    def broken(system: str, fault: str) -> str:
        return f"{by[system][fault].broken}/{by[system][fault].cells}"

    def once(system: str) -> str:
        cells = scenario.of(system, ["crash_after_commit"])
        return f"{sum(c.truth['commits']['a'] == 1 for c in cells)}/{len(cells)} {system}"

    fh, sy, no = total["file_hash"], total["symbols"], total["no_premise"]
    compared, trade = side_by_side(by, ORDERED)
    benign = by["file_hash"]["benign_edit_elsewhere"]
    traded = trade == (["benign_edit_elsewhere"], ["same_signature_meaning_change"])
    return [
        TEXT("dial", fh=fh, sy=sy, no=no),
        "symbols against file_hash, case by case: "
        + compared
        + "."
        + (TEXT.then("dial_trade") if traded else ""),
        TEXT("floors", meaning=broken("symbols", "same_signature_meaning_change"), benign=benign),
        TEXT(
            "no_premise",
            rename=broken("no_premise", "rename"),
            duplicate=broken("no_premise", "duplicated_work"),
            meaning=broken("no_premise", "same_signature_meaning_change"),
            crash=broken("no_premise", "crash_before_apply_then_rename"),
        ),
        TEXT(
            "recovery",
            file_hash=broken("file_hash", "crash_before_apply_then_rename"),
            symbols=broken("symbols", "crash_before_apply_then_rename"),
            once=", ".join(once(s) for s in SYSTEMS),
        ),
    ]


def repeated(scenario: Scenario) -> str:
    varied = [
        f"{s} / {f}" for s in SYSTEMS for f in ORDERED if len(verdicts(scenario.of(s, [f]))) > 1
    ]
    repetitions = (
        max((c.detail["repetition"] for c in scenario.cells if c.fault in ORDERED), default=0) + 1
    )
    if repetitions == 1:
        return "One repetition of each case: whether the verdicts repeat is not measured."
    if not varied:
        return TEXT("deterministic", repetitions=repetitions)
    return "The ordered cases varied between repetitions in: " + ", ".join(varied) + "."


def races(scenario: Scenario, by: Tallies) -> str | None:
    if not any(c.fault in RACES for c in scenario.cells):
        return None
    race = {s: tally(scenario.of(s, RACES)) for s in SYSTEMS}
    hashed = scenario.of("file_hash", RACES)
    contract = scenario.of("symbols", ["race_rename", "race_same_signature_meaning_change"])
    a_first = [c for c in contract if c.detail["dispatch_order"][:1] == ["a"]]
    callers = [
        c
        for c in a_first
        if any("is used only in" in p for p in c.detail["failed_premises"].get("b", []))
    ]
    meaning = scenario.of("symbols", ["race_same_signature_meaning_change"])
    b_first = [c for c in meaning if c.detail["dispatch_order"][:1] == ["b"]]
    return TEXT(
        "races",
        broken=", ".join(f"{race[s].broken}/{race[s].cells} {s}" for s in SYSTEMS),
        callers=len(callers),
        a_first=len(a_first),
        landed=sum(c.truth["broken_code_landed"] for c in b_first),
        b_first=len(b_first),
        one_landed=sum(sum(c.truth["landed"].values()) == 1 for c in hashed),
        hashed=len(hashed),
        benign=by["file_hash"]["race_benign_edit_elsewhere"],
    )


def findings(scenario: Scenario) -> list[str]:
    by = {s: {f: tally(scenario.of(s, [f])) for f in (*ORDERED, *RACES)} for s in SYSTEMS}
    out = [*dial(scenario, by), repeated(scenario)]
    race = races(scenario, by)
    return out if race is None else [*out, race]
