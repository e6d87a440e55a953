"""Hostile input at the API (issue 15): every input is bounded and validated before anything is
written, so odd input gets a 4xx in the one error shape and leaves the ledger as it was; none
gets a 5xx, and nothing the API accepted can break a receipt later."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.conf import LazySettings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from gate_client.protocol import MAX_PAYLOAD_CHANGES
from ledger.core.canonical import MAX_DEPTH, MAX_SAFE_INTEGER
from ledger.models import Entry
from ledger.services import append_entry
from notary.errors import NotaryInputError
from notary.models import Effect, Lease, Tenant
from testkit.factories import CENTS_MONEY, client_for, leased, register

pytestmark = pytest.mark.django_db

AGENT = "refund-bot"


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value `depth` objects deep ({"a": {"a": ... leaf}})."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


@dataclass
class World:
    """One tenant with a tier-1 refunds target, a lease of amount_cents <= 2000 on case_1 and
    an agent client that sees 5xx as responses, not exceptions."""

    tenant: Tenant
    agent: APIClient
    approver: APIClient
    lease: Lease

    def proposal(self, amount: Any = 1500, **changes: Any) -> Proposal:
        fields: dict[str, Any] = {
            "case_id": "case_1",
            "target": "refunds",
            "action": "refund",
            "payload": {"payment": "pay_1", "amount_cents": amount},
            "lease_id": self.lease.lease_id,
            "tenant": self.tenant.slug,
            **changes,
        }
        return Proposal(**fields)

    def propose_request(self, proposal: Proposal | None = None) -> dict[str, Any]:
        proposal = proposal or self.proposal()
        return {"effect_id": proposal.effect_id, "proposal": proposal.proposed_body([])}

    def post(self, path: str, body: Any, client: APIClient | None = None) -> Any:
        """POST `body` as JSON text (a str is sent as it is: JSON no dict can spell)."""
        raw = body if isinstance(body, str | bytes) else json.dumps(body)
        return (client or self.agent).post(path, raw, content_type="application/json")

    def proposed(self, amount: int = 1500) -> str:
        """An effect proposed and dispatched (attempt 1) through the API; its id."""
        request = {**self.propose_request(self.proposal(amount)), "dispatch": {"premises": []}}
        answer = self.post("/v1/effects", request)
        assert answer.status_code == 201 and answer.json()["dispatched"], answer.json()
        return str(request["effect_id"])

    def outcome(self, effect_id: str, kind: str, body: Any) -> Any:
        return self.post(f"/v1/effects/{effect_id}/outcome", {"kind": kind, "body": body})

    def entries(self) -> int:
        return Entry.objects.filter(log_id=self.tenant.log_id).count()


def quiet(client: APIClient) -> APIClient:
    client.raise_request_exception = False  # a 5xx comes back as a response to assert on
    return client


@pytest.fixture
def world(acme: Tenant) -> World:
    register(acme, "refunds", tier=1, money=CENTS_MONEY)
    agent = quiet(client_for(acme, "agent", AGENT))
    lease = leased(acme, "case_1", "refund", requested_by=AGENT, limits={"amount_cents": 2000})
    return World(acme, agent, quiet(client_for(acme, "approver", "alice")), lease)


def assert_refused(world: World, answer: Any, before: int, status: int = 400) -> dict[str, Any]:
    """A 4xx in the one error shape, and the ledger as it was."""
    assert answer.status_code == status, answer.content[:500]
    assert answer["Content-Type"] == "application/json"
    body: dict[str, Any] = answer.json()
    assert {"error", "detail"} <= set(body) and isinstance(body["error"], str), body
    assert world.entries() == before
    return body


# --- MEDIUM: an amount below one is no amount: refused before anything is written -------------


@pytest.mark.parametrize("amount", [-5000, -MAX_SAFE_INTEGER, 0])
def test_an_amount_below_one_is_refused_before_anything_is_written(
    world: World, amount: int
) -> None:
    request = {**world.propose_request(world.proposal(amount)), "dispatch": {"premises": []}}
    before = world.entries()
    body = assert_refused(world, world.post("/v1/effects", request), before)
    assert "'amount_cents'" in body["detail"] and "from 1" in body["detail"], body


@pytest.mark.parametrize(
    "limits",
    [
        {"amount_cents": 0},
        {"amount_cents": -5000},
        {"amount_cents": MAX_SAFE_INTEGER + 1},
        {"amount\x00cents": 5},
        {"a" * 101: 5},
        {f"limit_{i}": 5 for i in range(33)},
    ],
    ids=["zero", "negative", "past 2^53", "NUL in a name", "a long name", "33 limits"],
)
def test_a_lease_limit_is_a_positive_amount(world: World, limits: dict[str, int]) -> None:
    before, leases = world.entries(), Lease.objects.count()
    grant = {
        "case_id": "case_2",
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "requested_by": AGENT,
        "limits": limits,
    }
    assert_refused(world, world.post("/v1/leases", grant, client=world.approver), before)
    asked = world.post(
        "/v1/lease-requests", {k: v for k, v in grant.items() if k != "requested_by"}
    )
    assert_refused(world, asked, before)
    assert Lease.objects.count() == leases
    with pytest.raises(NotaryInputError):
        leased(world.tenant, "case_2", "refund", requested_by=AGENT, limits=limits)


# --- MEDIUM: outcome bodies validated fully, receipts that cannot break ------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"reason": "payload_changed"},
        {"reason": "payload_changed", "payload_hash": 5},
        {"reason": "payload_changed", "payload_hash": "ABC"},
        {"reason": "payload_changed", "payload_hash": "0" * 64, "standing_payload_hash": "1" * 64},
    ],
    ids=["no hash", "a number", "not hex", "another standing payload"],
)
def test_a_malformed_payload_change_is_refused_and_the_receipt_stands(
    world: World, body: dict[str, Any]
) -> None:
    effect_id = world.proposed()
    before = world.entries()
    assert_refused(world, world.outcome(effect_id, "REFUSED", body), before)
    assert world.agent.get(f"/v1/effects/{effect_id}/receipt").status_code == 200


def test_the_standing_payload_is_not_a_payload_change(world: World) -> None:
    effect_id = world.proposed()
    standing = world.proposal().payload_hash
    before = world.entries()
    body = {"reason": "payload_changed", "payload_hash": standing}
    assert_refused(world, world.outcome(effect_id, "REFUSED", body), before)


def test_a_receipt_derives_over_a_malformed_entry_already_in_the_ledger(world: World) -> None:
    """An entry written before outcomes were validated (or by ledger_append): the receipt of
    the effect is still a 200, and the receipt of a payload it fails to name a 404."""
    effect_id = world.proposed()
    append_entry(
        log=world.tenant.log,
        kind="REFUSED",
        body={"reason": "payload_changed"},
        effect_id=effect_id,
    )
    shown = world.agent.get(f"/v1/effects/{effect_id}/receipt")
    assert shown.status_code == 200, shown.content[:300]
    assert shown.json()["receipt"]["final_state"] == "DISPATCHED"
    missing = world.agent.get(f"/v1/effects/{effect_id}/receipt", {"payload_hash": "0" * 64})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_a_payload_change_is_recorded_once_and_boundedly(world: World) -> None:
    effect_id = world.proposed()
    standing = world.proposal().payload_hash

    def change(n: int) -> Any:
        body = {
            "reason": "payload_changed",
            "payload_hash": f"{n:064x}",
            "standing_payload_hash": standing,
        }
        return world.outcome(effect_id, "REFUSED", body)

    assert change(1).status_code == 201
    before = world.entries()
    retried = change(1)
    assert retried.status_code == 200 and retried.json()["recorded"] is False
    assert world.entries() == before
    committed = world.outcome(
        effect_id, "COMMITTED", {"state": "COMMITTED", "attempt": 1, "result_ref": "re_1"}
    )
    assert committed.status_code == 201
    # After the verdict a re-decided payload is still refused on the record (the gate's
    # resubmit after recover() does this), once, and only up to the bound.
    for n in range(2, MAX_PAYLOAD_CHANGES + 1):
        assert change(n).status_code == 201
    assert change(MAX_PAYLOAD_CHANGES).status_code == 200
    before = world.entries()
    assert_refused(world, change(MAX_PAYLOAD_CHANGES + 1), before)
    receipt = world.agent.get(
        f"/v1/effects/{effect_id}/receipt", {"payload_hash": f"{MAX_PAYLOAD_CHANGES:064x}"}
    )
    assert receipt.json()["receipt"]["final_state"] == "REFUSED:payload_changed"


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("AMBIGUOUS", {"attempt": [1]}),
        ("REFUSED", {"reason": "lease_revoked_at_recovery", "attempt": {"n": 1}}),
        ("COMMITTED", {"state": "COMMITTED", "attempt": [1], "result_ref": "re_1"}),
        ("FAILED", {"attempt": {"n": 1}, "code": "declined"}),
        ("COMMITTED", {"state": "COMMITTED", "attempt": 1, "result_ref": "re\x00"}),
        ("COMMITTED", {"state": "COMMITTED", "attempt": 1, "result_ref": "r" * 256}),
        ("FAILED", {"attempt": 1, "code": "c" * 91}),
        ("FAILED", {"attempt": 1, "code": "card\x00declined"}),
    ],
    ids=[
        "an attempt as a list",
        "an attempt as an object",
        "a commit's attempt as a list",
        "a failure's attempt as an object",
        "NUL in a result_ref",
        "a result_ref longer than its column",
        "a failure code longer than the state holds",
        "NUL in a failure code",
    ],
)
def test_outcome_fields_are_what_they_name_and_fit_where_they_go(
    world: World, kind: str, body: dict[str, Any]
) -> None:
    effect_id = world.proposed()
    before = world.entries()
    assert_refused(world, world.outcome(effect_id, kind, body), before)
    assert Effect.objects.get(effect_id=effect_id).state == "DISPATCHED"


# --- LOW: bounded ids, depth and size ----------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"case_id": "c" * 201},
        {"action": "a" * 101},
        {"lease_id": "l" * 101},
        {"case_id": "case\x001"},
        {"action": "re\x00fund"},
        {"lease_id": "lease\x00"},
        {"target": "refunds\x00"},
    ],
    ids=[
        "case_id over 200",
        "action over 100",
        "lease_id over 100",
        "NUL in case_id",
        "NUL in action",
        "NUL in lease_id",
        "NUL in target",
    ],
)
def test_proposal_ids_are_bounded_and_storable(world: World, changes: dict[str, str]) -> None:
    before = world.entries()
    request = world.propose_request(world.proposal(**changes))
    assert_refused(world, world.post("/v1/effects", request), before)
    assert not Effect.objects.exists()


def test_a_lone_surrogate_anywhere_in_a_body_is_refused(world: World) -> None:
    before = world.entries()
    text = json.dumps(world.propose_request()).replace('"case_1"', '"case_\\ud800"')
    assert "\\ud800" in text
    body = assert_refused(world, world.post("/v1/effects", text), before)
    assert body["error"] == "parse_error"
    assert not Effect.objects.exists()


@pytest.mark.parametrize("depth", [10_000, MAX_DEPTH + 1])
def test_a_body_nested_past_the_limit_is_refused(world: World, depth: int) -> None:
    before = world.entries()
    text = '{"effect_id": ' + "[" * depth + "]" * depth + "}"
    body = assert_refused(world, world.post("/v1/effects", text), before)
    assert body["error"] == "parse_error" and str(MAX_DEPTH) in body["detail"]


def test_a_payload_nested_past_the_limit_is_refused_and_one_within_it_works(
    world: World,
) -> None:
    before = world.entries()
    deep = world.propose_request()
    payload = {"amount_cents": 5, "x": nested(947)}
    # What canonical JSON would hash (plain keys, integers), had it no depth limit.
    digest = hashlib.sha256(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    deep["proposal"].update(payload=payload, payload_hash=digest.hexdigest())
    assert_refused(world, world.post("/v1/effects", deep), before)
    assert not Effect.objects.exists()
    # The body is 4 levels around the payload: {"proposal": {"payload": {"x": ...}}}.
    within = world.proposal(payload={"amount_cents": 5, "x": nested(MAX_DEPTH - 3)})
    request = {**world.propose_request(within), "dispatch": {"premises": []}}
    assert world.post("/v1/effects", request).status_code == 201
    service = quiet(client_for(world.tenant, "service", "payments", targets=["refunds"]))
    attested = world.post(
        "/v1/attestations", {"effect_id": within.effect_id, "performed": True}, client=service
    )
    assert attested.status_code == 201, attested.content[:300]
    receipt = world.agent.get(f"/v1/effects/{within.effect_id}/receipt")
    assert receipt.status_code == 200
    assert receipt.json()["receipt"]["final_state"] == "COMMITTED_ON_EVIDENCE"


def test_premises_are_bounded(world: World) -> None:
    effect_id = world.proposed()
    before = world.entries()
    many = [{"name": f"p{i}", "holds": True, "observed": None} for i in range(101)]
    long_name = [{"name": "p" * 201, "holds": True, "observed": None}]
    for premises in (many, long_name):
        answer = world.post(
            f"/v1/effects/{effect_id}/dispatch", {"attempt": 2, "premises": premises}
        )
        assert_refused(world, answer, before)


def test_an_api_body_over_the_upload_limit_is_a_json_413(
    world: World, settings: LazySettings
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    before = world.entries()
    request = world.propose_request(world.proposal(payload={"note": "x" * 8192}))
    body = assert_refused(world, world.post("/v1/effects", request), before, status=413)
    assert body["error"] == "too_large"
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=b", "text/plain"],
)
def test_the_api_takes_json_bodies_only(world: World, content_type: str) -> None:
    """A form or multipart body cannot carry a proposal's nested objects, and multipart parts
    would be spooled to disk past the body limit: any body but JSON is a 415."""
    before = world.entries()
    answer = world.agent.post("/v1/effects", "effect_id=e", content_type=content_type)
    body = assert_refused(world, answer, before, status=415)
    assert body["error"] == "unsupported_media_type"
    assert not Effect.objects.exists()


# --- every endpoint that writes, fuzzed --------------------------------------------------------

ODD_TEXT = st.sampled_from(
    ["", "\x00", "a\x00b", "\ud800", "\udfff", "x" * 201, "x" * 5000, "\u2028", "é", " "]
)
ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    ODD_TEXT,
)
ODD_JSON = st.recursive(
    ODD_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Past the limit, but not so deep that json.dumps here runs out of stack (the 10,000-deep body
# is sent as text above).
DEEP = st.integers(min_value=MAX_DEPTH - 4, max_value=600).map(nested)
ODD_VALUE = st.one_of(ODD_JSON, DEEP)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def value_at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = replaced(value[head], tuple(rest), new)
    return copy


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any] | str:
    """`valid` with one value somewhere replaced by an odd one, a key added, or a raw text."""
    how = draw(st.sampled_from(["replace", "replace", "replace", "add", "raw"]))
    if how == "raw":
        return draw(
            st.sampled_from(
                ["", "null", "[]", "5", '"x"', "{", '{"a": NaN}', "[" * 3000, '{"a": 1e999}']
            )
        )
    spots = list(paths(valid))
    if how == "add":
        objects = [p for p in spots if isinstance(value_at(valid, p), dict)]
        path = draw(st.sampled_from(objects))
        key, extra = draw(st.text(max_size=10)), draw(ODD_VALUE)
        return replaced(valid, path, {**value_at(valid, path), key: extra})  # type: ignore[no-any-return]
    result = replaced(valid, draw(st.sampled_from(spots)), draw(ODD_VALUE))
    return result if isinstance(result, dict) else json.dumps(result)


Endpoint = Callable[[World], tuple[str, dict[str, Any], APIClient]]


def _propose(world: World) -> tuple[str, dict[str, Any], APIClient]:
    return "/v1/effects", {**world.propose_request(), "dispatch": {"premises": []}}, world.agent


def _dispatch(world: World) -> tuple[str, dict[str, Any], APIClient]:
    effect_id = world.proposal().effect_id
    premises = [{"name": "p", "holds": True, "observed": {"seen": [1, "x"]}}]
    return f"/v1/effects/{effect_id}/dispatch", {"attempt": 2, "premises": premises}, world.agent


def _outcome(world: World) -> tuple[str, dict[str, Any], APIClient]:
    effect_id = world.proposal().effect_id
    body = {"state": "COMMITTED", "attempt": 1, "result_ref": "re_1", "recheck": None}
    return f"/v1/effects/{effect_id}/outcome", {"kind": "COMMITTED", "body": body}, world.agent


def _refusal(world: World) -> tuple[str, dict[str, Any], APIClient]:
    effect_id = world.proposal().effect_id
    body = {"reason": "payload_changed", "payload_hash": "ab" * 32}
    return f"/v1/effects/{effect_id}/outcome", {"kind": "REFUSED", "body": body}, world.agent


def _lease(world: World) -> tuple[str, dict[str, Any], APIClient]:
    grant = {
        "case_id": "case_2",
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "requested_by": AGENT,
        "limits": {"amount_cents": 2000},
        "payload_hash": None,
    }
    return "/v1/leases", grant, world.approver


ENDPOINTS: dict[str, Endpoint] = {
    "propose": _propose,
    "dispatch": _dispatch,
    "outcome": _outcome,
    "refusal": _refusal,
    "lease": _lease,
}


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_odd_json_at_every_writing_endpoint_is_never_a_server_error(
    world: World, endpoint: str
) -> None:
    world.proposed()  # the effect dispatch and outcome requests name
    path, valid, client = ENDPOINTS[endpoint](world)

    @settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
    @given(request=mutated(valid))
    def send(request: dict[str, Any] | str) -> None:
        before = world.entries()
        answer = world.post(path, request, client=client)
        assert answer.status_code < 500, (request, answer.content[:300])
        if answer.status_code >= 400:
            assert_refused(world, answer, before, status=answer.status_code)
        for effect in Effect.objects.filter(tenant=world.tenant):
            # whatever was accepted, its receipt still derives
            shown = world.agent.get(f"/v1/effects/{effect.effect_id}/receipt")
            assert shown.status_code == 200, shown.content[:300]

    send()
