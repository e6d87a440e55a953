from __future__ import annotations

import itertools

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger import selectors, services
from ledger.core import merkle
from ledger.core.canonical import canonical_json
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.entries import genesis_hash
from ledger.core.note import Signer
from ledger.models import Checkpoint, Entry, Log, MerkleNode


def _fill(log: Log, count: int) -> list[Entry]:
    return [
        services.append_entry(log=log, kind="PROPOSED", body={"n": i}, effect_id=f"eff_{i}")
        for i in range(count)
    ]


def test_entries_get_gapless_seqs_and_a_chain_from_the_genesis_hash(log: Log) -> None:
    entries = _fill(log, 5)
    assert [e.seq for e in entries] == [0, 1, 2, 3, 4]
    assert bytes(entries[0].prev_hash) == genesis_hash(log.origin)
    for before, after in itertools.pairwise(entries):
        assert bytes(after.prev_hash) == bytes(before.entry_hash)
    log.refresh_from_db()
    assert log.size == 5
    assert bytes(log.head_hash) == bytes(entries[-1].entry_hash)
    assert bytes(Entry.objects.get(log=log, seq=2).body) == canonical_json({"n": 2})


def _columns(row: Entry) -> dict[str, object]:
    values = {f.attname: getattr(row, f.attname) for f in Entry._meta.concrete_fields}
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in values.items()}


def test_the_rows_an_append_returns_are_the_rows_a_read_gives(log: Log) -> None:
    """append_entries builds its rows without reading them back: each must hold what the table
    does, field by field, be saved (not adding) and know its log without a query."""
    appended = _fill(log, 3)
    stored = Entry.objects.filter(log=log).order_by("seq")
    assert [_columns(row) for row in appended] == [_columns(row) for row in stored]
    assert [row.pk for row in appended] == [row.pk for row in stored]
    assert not any(row._state.adding for row in appended)
    with CaptureQueriesContext(connection) as queries:
        assert {row.log.pk for row in appended} == {log.pk}
    assert len(queries) == 0


def test_an_effects_entries_are_its_rows_and_no_others(make_log: object) -> None:
    """effect_entries reads its statement without the ORM: what it gives must be what the rows
    hold, bytes and aware instants alike, one effect of one log in seq order."""
    assert callable(make_log)
    log, other = make_log(), make_log()
    for n in range(3):
        for effect_id in ("eff_a", "eff_b"):
            services.append_entry(log=log, kind="PROPOSED", body={"n": n}, effect_id=effect_id)
    services.append_entry(log=other, kind="PROPOSED", body={"n": 0}, effect_id="eff_a")
    rows = Entry.objects.filter(log=log, effect_id="eff_a").order_by("seq")
    read = selectors.effect_entries(log=log, effect_id="eff_a")
    assert read == [row.as_ledger_entry() for row in rows]
    assert [e.seq for e in read] == [0, 2, 4]
    assert all(e.created_at.utcoffset() is not None for e in read)
    assert selectors.effect_entries(log=log, effect_id="eff_none") == []


def test_the_stored_tree_matches_the_rfc_definition(log: Log) -> None:
    entries = _fill(log, 37)
    leaves = [bytes(e.entry_hash) for e in entries]
    for size in (1, 2, 7, 16, 37):
        assert selectors.root_at(log=log, size=size) == merkle.root_of_leaf_hashes(leaves[:size])
    # n leaves complete n - popcount(n) internal nodes.
    assert MerkleNode.objects.filter(log=log).count() == 37 - bin(37).count("1")


def test_a_batch_append_equals_single_appends(make_log: object) -> None:
    assert callable(make_log)
    one_by_one, batched = make_log(), make_log()
    _fill(one_by_one, 9)
    services.append_entries(
        log=batched,
        items=[
            services.NewEntry(kind="PROPOSED", body={"n": i}, effect_id=f"eff_{i}")
            for i in range(9)
        ],
    )
    assert selectors.log_head(log=batched).size == 9
    assert [e.seq for e in Entry.objects.filter(log=batched).order_by("seq")] == list(range(9))
    assert selectors.verify_stored(log=batched).entries == 9


def test_proofs_from_stored_nodes_verify_and_take_a_bounded_number_of_queries(
    log: Log, signer: Signer
) -> None:
    leaves = [e.entry_hash for e in _fill(log, 100)]
    root = selectors.root_at(log=log, size=100)
    for index in (0, 1, 63, 64, 99):
        with CaptureQueriesContext(connection) as queries:
            proof = selectors.inclusion_proof(log=log, index=index, size=100)
        assert len(queries) == 2  # the tree size check, then every node in one query
        merkle.verify_inclusion(
            leaf_hash=bytes(leaves[index]), index=index, size=100, proof=proof, root=root
        )
    for old in (1, 31, 64, 99, 100):
        proof = selectors.consistency_proof(log=log, old_size=old, new_size=100)
        merkle.verify_consistency(
            old_size=old,
            new_size=100,
            old_root=selectors.root_at(log=log, size=old),
            new_root=root,
            proof=proof,
        )


def test_checkpoints_sign_the_current_head_once_per_size(log: Log, signer: Signer) -> None:
    _fill(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    again = services.sign_checkpoint(log=log, signer=signer)
    assert again.pk == first.pk
    opened = open_checkpoint(first.note, [log_verifier(log.origin, signer)], origin=log.origin)
    assert (opened.size, opened.root) == (3, selectors.root_at(log=log, size=3))
    _fill(log, 1)
    assert services.sign_checkpoint(log=log, signer=signer).size == 4
    assert selectors.latest_checkpoint(log=log).size == 4  # type: ignore[union-attr]


def test_tlog_proof_covers_only_entries_under_a_signed_checkpoint(log: Log, signer: Signer) -> None:
    _fill(log, 4)
    with pytest.raises(selectors.LedgerLookupError, match="no signed checkpoint"):
        selectors.tlog_proof(log=log, index=0)
    services.sign_checkpoint(log=log, signer=signer)
    _fill(log, 2)
    with pytest.raises(selectors.LedgerLookupError, match="not covered"):
        selectors.tlog_proof(log=log, index=4)
    with pytest.raises(selectors.LedgerLookupError, match="size 6"):
        selectors.tlog_proof(log=log, index=1, size=6)
    proof = selectors.tlog_proof(log=log, index=2)
    leaf = selectors.get_entry(log=log, seq=2).leaf_bytes()
    assert proof.verify(leaf, [log_verifier(log.origin, signer)], origin=log.origin).size == 4


@pytest.mark.parametrize(
    ("kind", "body", "effect_id", "message"),
    [
        ("NOT_A_KIND", {}, "", "unknown entry kind"),
        ("PROPOSED", {"amount": float("nan")}, "", "canonical"),
        ("PROPOSED", {1: "x"}, "", "canonical"),
        ("PROPOSED", b'{"b":1,"a":2}', "", "canonical"),
        ("PROPOSED", b"[1]", "", "JSON object"),
        ("PROPOSED", [1], "", "JSON object"),
        ("PROPOSED", {}, "has space", "effect_id"),
        ("PROPOSED", {}, "x" * 129, "effect_id"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    log: Log, kind: str, body: object, effect_id: str, message: str
) -> None:
    _fill(log, 2)
    with pytest.raises(services.LedgerInputError, match=message):
        services.append_entry(log=log, kind=kind, body=body, effect_id=effect_id)  # type: ignore[arg-type]
    assert selectors.log_head(log=log).size == 2
    assert Entry.objects.filter(log=log).count() == 2


@pytest.mark.parametrize("origin", ["", "has space", "a+b", "x" * 256, "tab\there"])
def test_invalid_origins_are_refused(db: None, origin: str) -> None:
    with pytest.raises(services.LedgerInputError):
        services.ensure_log(origin=origin)
    assert not Log.objects.filter(origin=origin).exists()


def test_ensure_log_returns_the_same_log(db: None) -> None:
    first = services.ensure_log(origin="example.com/same")
    assert services.ensure_log(origin="example.com/same").pk == first.pk


@pytest.mark.parametrize("table", ["ledger_entry", "ledger_merklenode", "ledger_checkpoint"])
def test_the_database_refuses_update_and_delete_of_ledger_rows(
    log: Log, signer: Signer, table: str
) -> None:
    _fill(log, 4)
    services.sign_checkpoint(log=log, signer=signer)
    before = _snapshot(log)
    for statement in (f"UPDATE {table} SET log_id = log_id", f"DELETE FROM {table}"):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    assert _snapshot(log) == before


@pytest.mark.parametrize("table", ["ledger_entry", "ledger_merklenode", "ledger_checkpoint"])
def test_the_database_refuses_truncate_of_ledger_tables(
    log: Log, signer: Signer, table: str
) -> None:
    _fill(log, 4)
    services.sign_checkpoint(log=log, signer=signer)
    before = _snapshot(log)
    with (
        pytest.raises(DatabaseError, match="append-only: TRUNCATE"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        # The test settings allow TRUNCATE for teardown; an ordinary session does not.
        cursor.execute("SET LOCAL ledger.allow_truncate = 'off'")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks to trip on first
        cursor.execute(f"TRUNCATE {table} CASCADE")
    assert _snapshot(log) == before


def test_the_orm_cannot_change_or_delete_entries_either(log: Log) -> None:
    _fill(log, 2)
    before = _snapshot(log)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Entry.objects.filter(log=log).update(kind="COMMITTED")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Entry.objects.filter(log=log, seq=1).delete()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Checkpoint.objects.filter(log=log).update(size=0)
        MerkleNode.objects.filter(log=log).delete()
        raise DatabaseError("append-only: reached only if the deletes were allowed")
    assert _snapshot(log) == before


def _snapshot(log: Log) -> tuple[list[tuple[object, ...]], ...]:
    return (
        list(
            Entry.objects.filter(log=log).order_by("seq").values_list("seq", "kind", "entry_hash")
        ),
        list(
            MerkleNode.objects.filter(log=log).order_by("id").values_list("level", "index", "hash")
        ),
        list(Checkpoint.objects.filter(log=log).order_by("size").values_list("size", "note")),
    )
