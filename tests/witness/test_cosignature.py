"""The witness's cosignature/v1 keys and lines, against the spec's worked rules (no process)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from witness.cosignature import (
    CosignatureError,
    CosignerKey,
    parse_cosigner_skey,
    parse_cosigner_vkey,
)

BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"


def test_key_id_is_sha256_of_name_newline_0x04_and_key() -> None:
    key = CosignerKey.generate("witness.example.com/w1")
    public = key.verifier.public_key
    expected = hashlib.sha256(b"witness.example.com/w1\n\x04" + public).digest()[:4]
    assert key.verifier.key_id.to_bytes(4, "big") == expected
    assert key.verifier.vkey == (
        f"witness.example.com/w1+{expected.hex()}+" + base64.b64encode(b"\x04" + public).decode()
    )
    assert parse_cosigner_vkey(key.verifier.vkey) == key.verifier
    assert parse_cosigner_skey(key.skey) == key


def test_cosignature_line_verifies_and_carries_its_timestamp() -> None:
    key = CosignerKey.generate("witness.example.com/w1")
    line = key.cosign(BODY, timestamp=1679315147)
    assert line.startswith("\u2014 witness.example.com/w1 ") and line.endswith("\n")
    assert key.verifier.timestamp_of(line, BODY) == 1679315147
    assert CosignerKey.generate("other").verifier.timestamp_of(line, BODY) is None
    with pytest.raises(CosignatureError, match="invalid cosignature"):
        key.verifier.timestamp_of(line, BODY.replace("20852163", "20852164"))


def test_a_zero_timestamp_is_never_signed() -> None:
    with pytest.raises(CosignatureError, match="timestamp 0"):
        CosignerKey.generate("w").cosign(BODY, timestamp=0)


def test_a_note_key_is_not_a_cosigner_key() -> None:
    seed = bytes(32)
    with pytest.raises(CosignatureError, match="0x04"):
        parse_cosigner_skey("PRIVATE+KEY+w+00000000+" + base64.b64encode(b"\x01" + seed).decode())
