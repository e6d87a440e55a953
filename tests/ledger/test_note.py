"""C2SP signed notes, checked byte for byte against the Go reference's published example."""

from __future__ import annotations

import base64

import pytest

from ledger.core.note import (
    NoteError,
    Signer,
    open_note,
    parse_skey,
    parse_vkey,
    sign_note,
)

# From golang.org/x/mod/sumdb/note's package documentation.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT
    + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfq"
    "dngotpRZb6KE6RyyBwJnAM=\n"
)


def test_signing_reproduces_the_reference_note_exactly() -> None:
    signer = parse_skey(GO_SKEY)
    assert signer.verifier.vkey == GO_VKEY
    assert signer.skey == GO_SKEY
    assert sign_note(GO_TEXT, [signer]) == GO_NOTE


def test_the_reference_note_opens_with_the_reference_vkey() -> None:
    opened = open_note(GO_NOTE, [parse_vkey(GO_VKEY)])
    assert opened.text == GO_TEXT
    assert [v.vkey for v in opened.verified_by] == [GO_VKEY]


def test_round_trip_with_a_generated_key() -> None:
    signer = Signer.generate("example.com/log")
    vkey = parse_vkey(signer.verifier.vkey)
    assert parse_skey(signer.skey) == signer
    note = sign_note("hello\nworld\n", [signer])
    assert open_note(note.encode(), [vkey]).text == "hello\nworld\n"


def test_signatures_by_unknown_keys_are_ignored() -> None:
    ours, theirs = Signer.generate("example.com/log"), Signer.generate("witness.example")
    note = sign_note("text\n", [theirs, ours])
    opened = open_note(note, [ours.verifier])
    assert opened.verified_by == (ours.verifier,)
    assert opened.unknown_signatures == 1


def test_a_note_signed_by_another_key_under_the_same_name_is_rejected() -> None:
    real, impostor = Signer.generate("example.com/log"), Signer.generate("example.com/log")
    note = sign_note("size 10\n", [impostor])
    # Same name, different key id: an unknown key, so no trusted signature at all.
    with pytest.raises(NoteError, match="no valid signature"):
        open_note(note, [real.verifier])


def test_a_bad_signature_by_a_known_key_rejects_the_whole_note() -> None:
    signer, witness = Signer.generate("example.com/log"), Signer.generate("witness.example")
    note = sign_note("text\n", [signer, witness])
    forged = note.replace("text\n", "TEXT\n", 1)
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(forged, [signer.verifier, witness.verifier])
    # A known key id with a signature made by another key under that id is also bad.
    line = note.splitlines()[2]
    _, encoded = line[2:].split(" ")
    raw = base64.b64decode(encoded)
    other = Signer.generate("example.com/log").sign(b"text\n")
    swapped = note.replace(encoded, base64.b64encode(raw[:4] + other).decode())
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(swapped, [signer.verifier])


@pytest.mark.parametrize(
    "note",
    [
        "no signatures\n",
        "text\n\n",
        "text\n\n— name\n",
        "text\n\n- example.com/log AAAA\n",
        "text\n\n— example.com/log AAA\n",
        "text\n\n— example.com/log !!!!\n",
        "text\n\n— example.com/log AAAA",
        "tab\there\n\n— example.com/log AAAAAAAA\n",
    ],
)
def test_malformed_notes_are_refused(note: str) -> None:
    with pytest.raises(NoteError):
        open_note(note, [Signer.generate("example.com/log").verifier])


@pytest.mark.parametrize(
    "vkey",
    [
        "",
        "name+c74f20a3",
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+AhpcQcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+not base64",
    ],
)
def test_malformed_vkeys_are_refused(vkey: str) -> None:
    with pytest.raises(NoteError):
        parse_vkey(vkey)


def test_text_must_end_in_a_newline_and_hold_no_control_characters() -> None:
    signer = Signer.generate("example.com/log")
    with pytest.raises(NoteError):
        sign_note("no newline", [signer])
    with pytest.raises(NoteError):
        sign_note("bell\x07\n", [signer])
