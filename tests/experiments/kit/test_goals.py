"""make bench's goals summary: each bench's goal rows, recorded as it prints them, in one table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.kit import goals
from experiments.kit.served import print_goals


def test_each_benchs_printed_goals_end_up_in_one_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = tmp_path / "goals.jsonl"
    print_goals([["appends >= 2x", "0.37x", "NOT met"]])  # no file named: nothing recorded
    assert not recorded.exists()

    monkeypatch.setenv(goals.GOALS_FILE_VARIABLE, str(recorded))
    monkeypatch.setattr(goals, "_bench_name", lambda: "ledger")
    print_goals([["appends >= 2x", "0.37x", "NOT met"]])
    monkeypatch.setattr(goals, "_bench_name", lambda: "exports")
    print_goals([["size <= 2,500 B", "2,430 B", "met"], ["verify >= 400k/min", "181k", "NOT met"]])
    assert "## Goals" in capsys.readouterr().out  # each bench still prints its own section

    goals.main([str(recorded)])
    table = capsys.readouterr().out
    rows = [
        [cell.strip() for cell in line.split("|")[1:5]]
        for line in table.splitlines()
        if line.startswith("| ")
    ]
    assert rows[1:] == [
        ["ledger", "appends >= 2x", "0.37x", "NOT met"],
        ["exports", "size <= 2,500 B", "2,430 B", "met"],
        ["exports", "verify >= 400k/min", "181k", "NOT met"],
    ]
    assert "1 of 3 goals met." in table


def test_no_recorded_goals_is_said_not_shown_as_an_empty_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "experiments.kit.goals", str(tmp_path / "none.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "no goals were recorded" in done.stderr
