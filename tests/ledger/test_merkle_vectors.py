"""The transparency-dev/merkle test vectors (Apache-2.0, see merkle_vectors/SOURCE.txt), kept in
the repository beside this test."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.core.merkle import ProofError, verify_consistency, verify_inclusion

VECTORS = Path(__file__).resolve().parent / "merkle_vectors"


def _cases(kind: str) -> list[Any]:
    files = sorted((VECTORS / kind).rglob("*.json"))
    return [pytest.param(path, id=str(path.relative_to(VECTORS / kind))) for path in files]


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def test_the_vectors_are_there() -> None:
    assert len(_cases("inclusion")) > 80, f"inclusion vectors not found under {VECTORS}"
    assert len(_cases("consistency")) > 80, f"consistency vectors not found under {VECTORS}"


@pytest.mark.parametrize("path", _cases("inclusion"))
def test_inclusion_vector(path: Path) -> None:
    case = json.loads(path.read_text())
    arguments = {
        "leaf_hash": _b64(case["leafHash"]),
        "index": case["leafIdx"],
        "size": case["treeSize"],
        "proof": [_b64(item) for item in case["proof"] or []],
        "root": _b64(case["root"]),
    }
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(**arguments)
    else:
        verify_inclusion(**arguments)


@pytest.mark.parametrize("path", _cases("consistency"))
def test_consistency_vector(path: Path) -> None:
    case = json.loads(path.read_text())
    arguments = {
        "old_size": case["size1"],
        "new_size": case["size2"],
        "old_root": _b64(case["root1"]),
        "new_root": _b64(case["root2"]),
        "proof": [_b64(item) for item in case["proof"] or []],
    }
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(**arguments)
    else:
        verify_consistency(**arguments)
