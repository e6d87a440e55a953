"""The ledger's read endpoints: published signing keys, a tenant's latest checkpoint, proofs."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from ledger import selectors as ledger_selectors
from ledger import services as ledger_services
from ledger.core.checkpoint import CheckpointError, open_checkpoint, parse_tlog_proof
from ledger.core.merkle import leaf_hash, verify_consistency, verify_inclusion
from ledger.core.note import Signer, parse_vkey
from ledger.keys import load_signing_key
from ledger.models import Checkpoint, Log
from notary.models import Role, Tenant
from testkit.factories import client_for

pytestmark = pytest.mark.django_db


def client_of(tenant: Tenant, role: str = Role.AUDITOR) -> APIClient:
    return client_for(tenant, role, f"{role}@{tenant.slug}")


def grow(log: Log, count: int) -> None:
    for _ in range(count):
        ledger_services.append_entry(log=log, kind="OBSERVED", body={"size": log.size})


def b64decode_all(hashes: list[str]) -> list[bytes]:
    return [base64.b64decode(h) for h in hashes]


def get(client: APIClient, url: str, **params: Any) -> tuple[int, Any]:
    reply = client.get(url, params)
    return reply.status_code, reply.json()


def test_the_signing_keys_are_public_with_their_periods(acme: Tenant, signer: Signer) -> None:
    anyone = APIClient()
    assert get(anyone, "/v1/keys") == (200, [])

    grow(acme.log, 1)
    first = ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    call_command("rotate_signing_key", stdout=io.StringIO(), stderr=io.StringIO())
    grow(acme.log, 1)
    second = ledger_services.sign_checkpoint(log=acme.log, signer=load_signing_key())

    status, keys = get(anyone, "/v1/keys")
    assert status == 200
    assert [(k["vkey"], k["valid_until"] is None) for k in keys] == [
        (signer.verifier.vkey, False),
        (load_signing_key().verifier.vkey, True),
    ]
    assert keys[0] == {
        "name": signer.name,
        "key_id": f"{signer.verifier.key_id:08x}",
        "vkey": signer.verifier.vkey,
        "valid_from": first.created_at.isoformat().replace("+00:00", "Z"),
        "valid_until": second.created_at.isoformat().replace("+00:00", "Z"),
    }
    assert keys[1]["valid_from"] == keys[0]["valid_until"]

    # Public means no credentials are looked at, not even a wrong one.
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Bearer ik_nope_nope")
    assert get(stranger, "/v1/keys")[0] == 200


def test_each_tenant_sees_only_its_own_logs_latest_checkpoint(
    acme: Tenant, globex: Tenant, signer: Signer
) -> None:
    status, body = get(client_of(acme), "/v1/checkpoints/latest")
    assert status == 404
    assert body["error"] == "not_found"
    assert "no signed checkpoint yet" in body["detail"]

    grow(acme.log, 3)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    grow(acme.log, 2)
    acme_latest = ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    grow(globex.log, 1)
    globex_latest = ledger_services.sign_checkpoint(log=globex.log, signer=signer)

    for role in Role.values:
        status, body = get(client_of(acme, role), "/v1/checkpoints/latest")
        assert status == 200
        assert body == {
            "origin": acme.log.origin,
            "size": 5,
            "note": acme_latest.note,
            "cosigned_by": [],  # no witnesses in these settings
        }
    assert get(client_of(globex), "/v1/checkpoints/latest") == (
        200,
        {"origin": globex.log.origin, "size": 1, "note": globex_latest.note, "cosigned_by": []},
    )
    body = get(client_of(globex), "/v1/checkpoints/latest")[1]
    verifiers = ledger_selectors.log_verifiers(log=globex.log)
    assert open_checkpoint(body["note"], verifiers, origin=globex.log.origin).size == 1


def test_inclusion_proofs_verify_against_the_signed_checkpoint(
    acme: Tenant, signer: Signer
) -> None:
    grow(acme.log, 3)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    grow(acme.log, 4)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    verifiers = ledger_selectors.log_verifiers(log=acme.log)
    client = client_of(acme, Role.AGENT)

    for index, size, expected_size in ((0, None, 7), (6, None, 7), (2, 3, 3), (1, 7, 7)):
        params = {"index": index} if size is None else {"index": index, "size": size}
        status, body = get(client, "/v1/proofs/inclusion", **params)
        assert status == 200, body
        assert (body["index"], body["size"]) == (index, expected_size)
        leaf = ledger_selectors.get_entry(log=acme.log, seq=index).leaf_bytes()
        checkpoint = parse_tlog_proof(body["tlog_proof"]).verify(
            leaf, verifiers, origin=acme.log.origin
        )
        assert checkpoint.size == expected_size
        verify_inclusion(
            leaf_hash=leaf_hash(leaf),
            index=index,
            size=expected_size,
            proof=b64decode_all(body["hashes"]),
            root=checkpoint.root,
        )


def test_consistency_proofs_verify_between_signed_checkpoints(acme: Tenant, signer: Signer) -> None:
    notes = {}
    for count in (1, 2, 5):
        grow(acme.log, count)
        checkpoint = ledger_services.sign_checkpoint(log=acme.log, signer=signer)
        notes[checkpoint.size] = checkpoint.note
    verifiers = ledger_selectors.log_verifiers(log=acme.log)
    opened = {size: open_checkpoint(note, verifiers) for size, note in notes.items()}
    client = client_of(acme, Role.SERVICE)

    for old, new in ((1, 3), (3, 8), (1, 8), (8, 8)):
        status, body = get(client, "/v1/proofs/consistency", old=old, new=new)
        assert status == 200, body
        assert (body["old"], body["new"]) == (old, new)
        verify_consistency(
            old_size=old,
            new_size=new,
            old_root=opened[old].root,
            new_root=opened[new].root,
            proof=b64decode_all(body["hashes"]),
        )


def test_proofs_are_of_the_callers_log_only(acme: Tenant, globex: Tenant, signer: Signer) -> None:
    grow(acme.log, 6)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    grow(globex.log, 2)
    ledger_services.sign_checkpoint(log=globex.log, signer=signer)
    outsider = client_of(globex)

    status, body = get(outsider, "/v1/proofs/inclusion", index=1)
    assert status == 200
    assert body["size"] == 2
    assert globex.log.origin in body["tlog_proof"]
    assert acme.log.origin not in body["tlog_proof"]
    assert get(outsider, "/v1/proofs/inclusion", index=4)[0] == 404
    assert get(outsider, "/v1/proofs/inclusion", index=0, size=6)[0] == 404
    assert get(outsider, "/v1/proofs/consistency", old=2, new=6)[0] == 404


@pytest.mark.parametrize(
    ("url", "params", "status", "field_or_message"),
    [
        ("/v1/proofs/inclusion", {}, 400, "index"),
        ("/v1/proofs/inclusion", {"index": "one"}, 400, "index"),
        ("/v1/proofs/inclusion", {"index": -1}, 400, "index"),
        ("/v1/proofs/inclusion", {"index": 2**64}, 400, "index"),
        ("/v1/proofs/inclusion", {"index": 0, "size": 0}, 400, "size"),
        ("/v1/proofs/inclusion", {"index": 3, "size": 3}, 400, "less than size"),
        ("/v1/proofs/inclusion", {"index": 3}, 404, "not covered by the checkpoint of size 3"),
        ("/v1/proofs/inclusion", {"index": 0, "size": 2}, 404, "no signed checkpoint of size 2"),
        ("/v1/proofs/inclusion", {"index": 0, "size": 2**63}, 400, "size"),
        ("/v1/proofs/consistency", {"old": 1}, 400, "new"),
        ("/v1/proofs/consistency", {"old": 0, "new": 3}, 400, "old"),
        ("/v1/proofs/consistency", {"old": 3, "new": 2}, 400, "not be greater than new"),
        ("/v1/proofs/consistency", {"old": "x", "new": 3}, 400, "old"),
        ("/v1/proofs/consistency", {"old": 1, "new": 4}, 404, "no tree of size 4"),
        ("/v1/proofs/consistency", {"old": 1, "new": 2**63 - 1}, 404, "no tree of size"),
    ],
)
def test_bad_or_out_of_range_parameters_get_the_error_body(
    acme: Tenant,
    signer: Signer,
    url: str,
    params: dict[str, Any],
    status: int,
    field_or_message: str,
) -> None:
    grow(acme.log, 3)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    checkpoints = Checkpoint.objects.count()

    reply_status, body = get(client_of(acme), url, **params)
    assert reply_status == status
    assert body["error"] == ("invalid" if status == 400 else "not_found")
    assert field_or_message in str(body["detail"])
    assert Checkpoint.objects.count() == checkpoints


@pytest.mark.parametrize(
    "url", ["/v1/checkpoints/latest", "/v1/proofs/inclusion?index=0", "/v1/proofs/consistency"]
)
def test_the_tenant_endpoints_need_a_key(url: str) -> None:
    reply = APIClient().get(url)
    assert reply.status_code == 401
    assert reply.json()["error"] == "not_authenticated"
    refused = APIClient()
    refused.credentials(HTTP_AUTHORIZATION="Bearer ik_nope_nope")
    assert refused.get(url).json()["error"] == "authentication_failed"


def test_each_logs_vkey_is_published_and_opens_its_checkpoints_as_given(
    acme: Tenant, globex: Tenant, signer: Signer
) -> None:
    anyone = APIClient()
    origin = acme.log.origin
    assert get(anyone, f"/v1/logs/{origin}/vkey") == (200, {"origin": origin, "vkeys": []})
    grow(acme.log, 2)
    signed = ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    status, body = get(anyone, f"/v1/logs/{origin}/vkey")
    assert status == 200
    (published,) = body["vkeys"]
    assert published["vkey"].startswith(f"{origin}+{published['key_id']}+")
    assert published["valid_until"] is None
    # Exactly as given: no renaming, and the signature line carries that key id.
    verifier = parse_vkey(published["vkey"])
    assert open_checkpoint(signed.note, [verifier], origin=origin).size == 2
    assert f"\u2014 {origin} " in signed.note
    # Another log's vkey is the same public key under its own name: it opens nothing of acme's.
    theirs = get(anyone, f"/v1/logs/{globex.log.origin}/vkey")[1]["vkeys"][0]["vkey"]
    assert theirs != published["vkey"]
    with pytest.raises(CheckpointError):
        open_checkpoint(signed.note, [parse_vkey(theirs)])
    status, body = get(anyone, "/v1/logs/no.such.example/log/vkey")
    assert (status, body["error"]) == (404, "not_found")
