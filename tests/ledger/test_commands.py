"""The ledger's management commands, as an operator calls them."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger import selectors
from ledger.core.checkpoint import log_verifier, parse_tlog_proof
from ledger.core.merkle import verify_consistency
from ledger.core.note import Signer, parse_skey, parse_vkey
from ledger.models import Entry, Log

pytestmark = pytest.mark.django_db

ORIGIN = "cli.interlock.example/log"
COMMANDS = [
    "generate_signing_key",
    "rotate_signing_key",
    "ledger_append",
    "sign_checkpoint",
    "ledger_proof",
    "ledger_consistency",
    "verify_ledger",
]


def run(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def append(count: int, origin: str = ORIGIN) -> list[int]:
    return [
        int(run("ledger_append", "--log", origin, "--kind", "PROPOSED", "--body", f'{{"n": {i}}}'))
        for i in range(count)
    ]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        call_command(name, "--help")
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_generate_signing_key_prints_the_vkey_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "k"
    vkey = run("generate_signing_key", "--out", str(path), "--name", ORIGIN).strip()
    signer = parse_skey(path.read_text())
    assert parse_vkey(vkey) == signer.verifier
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CommandError, match="already exists"):
        run("generate_signing_key", "--out", str(path))
    assert parse_skey(path.read_text()) == signer
    with pytest.raises(CommandError, match="invalid key name"):
        run("generate_signing_key", "--out", str(tmp_path / "other"), "--name", "has space")


def test_ledger_append_creates_the_log_and_prints_seqs() -> None:
    assert append(3) == [0, 1, 2]
    assert Log.objects.get(origin=ORIGIN).size == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--body", "{not json"], "not valid JSON"),
        (["--body", "[1, 2]"], "JSON object"),
        (["--body", '{"x": NaN}'], "not valid JSON"),
        (["--body", "{}", "--effect-id", "bad id!"], "effect_id"),
        (["--body", "{}", "--log", "bad origin"], "invalid origin"),
    ],
)
def test_ledger_append_refuses_bad_input_and_writes_nothing(args: list[str], message: str) -> None:
    base = {"--log": ORIGIN, "--kind": "PROPOSED"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [item for pair in base.items() for item in pair]
    with pytest.raises(CommandError, match=message):
        run("ledger_append", *flat)
    assert Entry.objects.count() == 0


def test_sign_proof_and_consistency_round_trip(signer: Signer, tmp_path: Path) -> None:
    append(5)
    first = run("sign_checkpoint", "--log", ORIGIN)
    append(4)
    run("sign_checkpoint", "--log", ORIGIN)
    verifier = log_verifier(ORIGIN, signer)

    leaf_file = tmp_path / "leaf.json"
    proof_text = run("ledger_proof", "--log", ORIGIN, "--index", "3", "--entry-out", str(leaf_file))
    proof = parse_tlog_proof(proof_text)
    assert proof.verify(leaf_file.read_bytes(), [verifier], origin=ORIGIN).size == 9
    assert json.loads(leaf_file.read_bytes())["seq"] == 3

    older = parse_tlog_proof(run("ledger_proof", "--log", ORIGIN, "--index", "3", "--size", "5"))
    assert older.signed_checkpoint == first
    assert older.verify(leaf_file.read_bytes(), [verifier]).size == 5

    lines = run("ledger_consistency", "--log", ORIGIN, "--old", "5", "--new", "9").split()
    log = selectors.get_log(origin=ORIGIN)
    verify_consistency(
        old_size=5,
        new_size=9,
        old_root=selectors.root_at(log=log, size=5),
        new_root=selectors.root_at(log=log, size=9),
        proof=[base64.b64decode(line) for line in lines],
    )


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("sign_checkpoint", ["--log", "nope.example/log"], "no log with origin"),
        ("ledger_proof", ["--log", ORIGIN, "--index", "0"], "no signed checkpoint"),
        ("ledger_proof", ["--log", ORIGIN, "--index", "-1", "--size", "2"], "no signed checkpoint"),
        ("ledger_consistency", ["--log", ORIGIN, "--old", "0", "--new", "2"], "empty tree"),
        ("ledger_consistency", ["--log", ORIGIN, "--old", "2", "--new", "9"], "no tree of size 9"),
        ("ledger_consistency", ["--log", ORIGIN, "--old", "2", "--new", "1"], "larger than"),
        ("verify_ledger", ["--log", ORIGIN, "--vkey", "garbage"], "malformed verifier key"),
    ],
)
def test_commands_give_clear_errors_on_bad_input(
    signer: Signer, name: str, args: list[str], message: str
) -> None:
    append(2)
    with pytest.raises(CommandError, match=message):
        run(name, *args)


def test_sign_checkpoint_without_a_key_says_how_to_make_one(
    settings: object, tmp_path: Path
) -> None:
    append(1)
    settings.NOTARY_SIGNING_KEY_FILE = tmp_path / "missing.key"  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="generate_signing_key"):
        run("sign_checkpoint", "--log", ORIGIN)


def test_verify_ledger_reports_ok_with_the_notary_key_or_given_vkeys(signer: Signer) -> None:
    append(6)
    run("sign_checkpoint", "--log", ORIGIN)
    out = run("verify_ledger", "--log", ORIGIN, "--no-progress")
    assert out.startswith(f"OK {ORIGIN}: 6 entries, 4 Merkle nodes, 1 signed checkpoints")
    vkey = log_verifier(ORIGIN, signer).vkey
    assert run("verify_ledger", "--log", ORIGIN, "--no-progress", "--vkey", vkey).startswith("OK")
    stranger = log_verifier(ORIGIN, Signer.generate("x")).vkey
    with pytest.raises(CommandError, match="FAIL at seq 5: checkpoint at size 6"):
        run("verify_ledger", "--log", ORIGIN, "--no-progress", "--vkey", stranger)
