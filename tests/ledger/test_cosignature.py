"""The witness's cosignature/v1 keys and lines, against the spec's worked rules (no process)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from ledger.core.cosignature import (
    CosignatureError,
    CosignerKey,
    WitnessPolicy,
    cosigners,
    parse_cosigner_skey,
    parse_cosigner_vkey,
    require_cosignatures,
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


def _cosigned(body: str, *keys: CosignerKey) -> str:
    """A note of `body` with a stand-in log signature line and one cosignature per key."""
    log_line = "\u2014 log.example " + base64.b64encode(bytes(68)).decode() + "\n"
    return body + "\n" + log_line + "".join(k.cosign(body, timestamp=1700000000) for k in keys)


def test_a_quorum_counts_only_valid_cosignatures_of_trusted_witnesses() -> None:
    first, second, stranger = (CosignerKey.generate(f"w{n}.example") for n in range(3))
    trusted = [first.verifier, second.verifier]
    note = _cosigned(BODY, first, stranger)
    assert cosigners(note, trusted) == {"w0.example": 1700000000}
    assert require_cosignatures(note, trusted, quorum=1) == {"w0.example": 1700000000}
    missing = r"by 1 of .*\(w0\.example\), 2 required.*w1\.example"
    with pytest.raises(CosignatureError, match=missing):
        require_cosignatures(note, trusted, quorum=2)
    both = _cosigned(BODY, first, second)
    assert set(require_cosignatures(both, trusted, quorum=2)) == {"w0.example", "w1.example"}
    with pytest.raises(CosignatureError, match="3 cosignatures required of only 2"):
        require_cosignatures(both, trusted, quorum=3)


def test_a_forged_cosignature_by_a_trusted_witness_rejects_the_note() -> None:
    witness = CosignerKey.generate("w.example")
    other_body = BODY.replace("20852163", "20852164")
    forged = BODY + "\n" + witness.cosign(other_body, timestamp=1700000000)  # signs another tree
    with pytest.raises(CosignatureError, match=r"invalid cosignature by w\.example"):
        require_cosignatures(forged, [witness.verifier], quorum=1)


def test_a_witness_policy_defaults_to_every_witness_and_refuses_an_impossible_quorum() -> None:
    first, second = CosignerKey.generate("a.example"), CosignerKey.generate("b.example")
    vkeys = [first.verifier.vkey, second.verifier.vkey]
    assert WitnessPolicy.of(vkeys).quorum == 2
    assert WitnessPolicy.of([]).check(_cosigned(BODY)) == {}  # nothing required
    assert set(WitnessPolicy.of(vkeys, 1).check(_cosigned(BODY, second))) == {"b.example"}
    with pytest.raises(CosignatureError, match="2 required"):
        WitnessPolicy.of(vkeys).check(_cosigned(BODY, second))
    with pytest.raises(CosignatureError, match="quorum of 3"):
        WitnessPolicy.of(vkeys, 3)
