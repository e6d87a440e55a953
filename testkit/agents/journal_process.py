"""A child process for the journal tests: `python -m testkit.agents.journal_process ROLE PATH`.

It opens the journal, prints ``ready``, waits for one line on stdin (so the parent can release
every child at once), then acts and prints what happened."""

from __future__ import annotations

import sys

from gate_client.authorization import DispatchRequest
from gate_client.faults import CrashPoint, crash_point
from gate_client.journal import AttemptTaken, LocalJournal
from ledger.core.entries import EntryKind
from testkit.world import CENTS_DECLARATION


def main(role: str, path: str, *args: str) -> None:
    journal = LocalJournal(path)
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "append":
        writer, count = args[0], int(args[1])
        for n in range(count):
            journal.record(kind=EntryKind.OBSERVED, effect_id=f"{writer}-{n}", body={"n": n})
        print("done", flush=True)
    elif role == "dispatch":
        try:
            entry = journal.dispatch(
                DispatchRequest(
                    effect_id="eff_race",
                    attempt=1,
                    lease_id="lease_1",
                    case_id="case_1",
                    action="refund",
                    payload={"amount_cents": 2000},
                    payload_hash="h",
                    premises=[{"name": "writer", "holds": True, "observed": args[0]}],
                    declaration=CENTS_DECLARATION,
                )
            )
        except AttemptTaken:
            print("lost", flush=True)
        else:
            print(f"won {entry.kind}", flush=True)
    elif role == "propose":
        standing = journal.propose(effect_id="eff_race", body={"writer": args[0]})
        print(f"standing {standing.body_value()['writer']}", flush=True)
    elif role == "crash":
        journal.record(kind=EntryKind.PROPOSED, effect_id="eff_crash", body={"n": 1})
        crash_point(CrashPoint.AFTER_PROPOSED)
        journal.record(kind=EntryKind.DISPATCHED, effect_id="eff_crash", body={"attempt": 1})
        print("not killed", flush=True)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
