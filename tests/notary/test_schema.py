"""Every operation in the served OpenAPI schema, fuzzed by schemathesis against the WSGI app:
valid and invalid requests alike, sent with a key of a role the operation admits, get an answer
below 500 (schemathesis' `not_a_server_error` check). A 5xx is a bug: the test lists each one
with its request and the exception behind it.

Random generation rarely draws a few inputs that matter here (a NUL byte in a path segment,
integers past 2**53 in a JSON body), so those are also sent as explicit schemathesis cases."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from django.core.signals import got_request_exception
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup

from gate_client.proposal import Proposal
from notary.wsgi import application
from testkit.schema_records import ROLES, SchemaRecords, schema_records

# Committed rows, not a test transaction: a request that breaks its transaction must not turn
# every later request into a 500.
pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = 20  # per operation, per generation mode, per source of path parameters


def headers_for(records: SchemaRecords, operation: Any) -> dict[str, str]:
    """A key of the first role the operation admits (a bare request of another role is
    refused with 403 before its input is read), so requests get past the permission check."""
    names = {p.name for p in operation.path_parameters}
    bare = operation.Case(path_parameters={name: records.ids[name] for name in names})
    for role in ROLES:
        headers = {"Authorization": f"Bearer {records.tokens[role]}"}
        if bare.call(headers=headers).status_code != 403:
            return headers
    raise AssertionError(f"{operation.label}: every role is refused")


def proposed_body(proposal: Proposal, *observed: Any) -> dict[str, Any]:
    """The PROPOSED body the gate writes, with one holding premise per observation."""
    return proposal.proposed_body(
        [{"name": f"p{n}", "holds": True, "observed": o} for n, o in enumerate(observed)]
    )


@pytest.fixture
def notary() -> SchemaRecords:
    return schema_records("schema-fuzz")


@pytest.fixture
def schema() -> Any:
    return schemathesis.openapi.from_wsgi("/v1/schema/", application)


@pytest.fixture
def raised() -> Iterator[list[BaseException]]:
    """Exceptions the app turned into a 500, in order."""
    seen: list[BaseException] = []

    def record(sender: Any, request: Any = None, **kwargs: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            seen.append(exc)

    got_request_exception.connect(record, weak=False)
    try:
        yield seen
    finally:
        got_request_exception.disconnect(record)


def server_error(
    case: schemathesis.Case[Any],
    response: Any,
    headers: dict[str, str],
    cause: BaseException | None,
) -> str | None:
    """None if `not_a_server_error` passes; else the request and what the app raised."""
    try:
        case.validate_response(response, checks=[not_a_server_error])
    except FailureGroup as failure:
        why = f"{type(cause).__name__}: {cause}" if cause else str(failure)
        curl = case.as_curl_command(headers=headers)
        return f"{response.status_code} {case.operation.label}\n  {why}\n  {curl}"
    return None


def fuzz(
    strategy: Any,
    headers: dict[str, str],
    raised: list[BaseException],
    statuses: Counter[tuple[str, int]],
    failures: dict[tuple[str, str], str],
) -> Callable[[], None]:
    """A Hypothesis test over `strategy`: call each case, count its status, keep each distinct
    server error (by operation and exception) with the request that caused it."""

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def exercise(case: schemathesis.Case[Any]) -> None:
        before = len(raised)
        response = case.call(headers=headers)
        statuses[case.operation.label, response.status_code] += 1
        cause = raised[before] if len(raised) > before else None
        problem = server_error(case, response, headers, cause)
        if problem is not None:
            key = (case.operation.label, _first_line(problem.splitlines()[1]))
            failures.setdefault(key, problem)

    return exercise


def test_no_operation_answers_with_a_server_error(
    notary: SchemaRecords, schema: Any, raised: list[BaseException]
) -> None:
    # The webhook receiver takes no key: test_schema_conformance fuzzes it with signed bodies.
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if not result.ok().path.startswith("/webhooks/")
    ]
    assert len(operations) >= 10, [op.label for op in operations]
    failures: dict[tuple[str, str], str] = {}
    statuses: Counter[tuple[str, int]] = Counter()

    for operation in operations:
        headers = headers_for(notary, operation)
        names = {p.name for p in operation.path_parameters}
        sources: list[dict[str, str] | None] = [None]  # generated ids: mostly "not found"
        if names:
            sources.append({name: notary.ids[name] for name in names})  # records that exist
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            for path_parameters in sources:
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path_parameters
                )

                exercise = fuzz(strategy, headers, raised, statuses, failures)
                try:
                    exercise()
                except Unsatisfiable:
                    # Nothing to make invalid (no parameters, no body): no negative cases.
                    assert mode == schemathesis.GenerationMode.NEGATIVE, operation.label

    calls = sum(statuses.values())
    print(f"\n{len(operations)} operations, {calls} requests, {len(failures)} distinct 5xx")
    for (label, status), count in sorted(statuses.items()):
        print(f"  {label}: {status} x{count}")
    # The keys work: every operation answered something other than 401 at least once.
    assert {label for label, status in statuses if status != 401} == {op.label for op in operations}
    assert not failures, "\n\n".join(failures.values())


@dataclass(frozen=True)
class Edge:
    why: str
    method: str
    path: str
    path_parameters: dict[str, str] | None = None
    body: Any = None  # or a function of the SchemaRecords, for a body naming its records
    query: dict[str, Any] | None = None


def big_premise_proposal(notary: SchemaRecords) -> dict[str, Any]:
    """A well-formed proposal of a new effect whose one premise observed 2**70."""
    proposal = Proposal(
        case_id="case_big",
        target="refunds",
        action="refund",
        payload={"amount_cents": 100},
        lease_id=notary.lease_id,
        tenant=notary.tenant.slug,
    )
    return {"effect_id": proposal.effect_id, "proposal": proposed_body(proposal, 2**70)}


EDGES = [
    Edge(
        "NUL in effect id",
        "GET",
        "/v1/effects/{effect_id}",
        {"effect_id": "eff_\x00"},
    ),
    Edge(
        "NUL in effect id, receipt",
        "GET",
        "/v1/effects/{effect_id}/receipt",
        {"effect_id": "eff_\x00"},
    ),
    Edge(
        "NUL in effect id, dispatch",
        "POST",
        "/v1/effects/{effect_id}/dispatch",
        {"effect_id": "eff_\x00"},
        body={"attempt": 1, "premises": []},
    ),
    Edge(
        "NUL in effect id, outcome",
        "POST",
        "/v1/effects/{effect_id}/outcome",
        {"effect_id": "eff_\x00"},
        body={"kind": "AMBIGUOUS", "body": {}},
    ),
    Edge(
        "NUL in lease id",
        "GET",
        "/v1/leases/{lease_id}",
        {"lease_id": "lease_\x00"},
    ),
    Edge(
        "NUL in lease id, revoke",
        "POST",
        "/v1/leases/{lease_id}/revoke",
        {"lease_id": "lease_\x00"},
        body={"reason": "disputed"},
    ),
    Edge(
        "integer past 2**53 in an outcome body",
        "POST",
        "/v1/effects/{effect_id}/outcome",
        body={"kind": "AMBIGUOUS", "body": {"recheck": {"n": 2**70}}},
    ),
    Edge(
        "lone surrogate in an outcome body",
        "POST",
        "/v1/effects/{effect_id}/outcome",
        body={"kind": "AMBIGUOUS", "body": {"recheck": {"note": "\ud800"}}},
    ),
    Edge(
        "integer past 2**53 as a lease limit",
        "POST",
        "/v1/leases",
        body={
            "case_id": "case_2",
            "action": "refund",
            "expires_at": "2099-01-01T00:00:00Z",
            "requested_by": "refund-bot",
            "limits": {"amount_cents": 2**70},
        },
    ),
    Edge(
        "integer past 2**53 observed by a proposed premise",
        "POST",
        "/v1/effects",
        body=lambda notary: big_premise_proposal(notary),
    ),
    Edge(
        "integer past 2**53 observed by a dispatched premise",
        "POST",
        "/v1/effects/{effect_id}/dispatch",
        body={"attempt": 2, "premises": [{"name": "p", "holds": True, "observed": 2**70}]},
    ),
    Edge(
        "NUL in a payload_hash query",
        "GET",
        "/v1/effects/{effect_id}/receipt",
        query={"payload_hash": "\x00"},
    ),
    Edge("NUL in a limit query", "GET", "/v1/effects/unsettled", query={"limit": "\x00"}),
    Edge("huge proof index", "GET", "/v1/proofs/inclusion", query={"index": 2**70, "size": 1}),
]


@pytest.mark.parametrize("edge", EDGES, ids=[edge.why for edge in EDGES])
def test_edge_inputs_are_refused_without_a_server_error(
    notary: SchemaRecords, schema: Any, raised: list[BaseException], edge: Edge
) -> None:
    operation = schema[edge.path][edge.method]
    path_parameters = edge.path_parameters
    if path_parameters is None and "{effect_id}" in edge.path:
        path_parameters = {"effect_id": notary.effect_id}
    kwargs: dict[str, Any] = {"path_parameters": path_parameters, "query": edge.query}
    if edge.body is not None:
        body = edge.body(notary) if callable(edge.body) else edge.body
        kwargs |= {"body": body, "media_type": "application/json"}
    case = operation.Case(**kwargs)
    headers = headers_for(notary, operation)
    before = len(raised)
    response = case.call(headers=headers)
    problem = server_error(case, response, headers, raised[before] if raised[before:] else None)
    assert problem is None, problem
    assert 400 <= response.status_code < 500, (response.status_code, response.text)


def _first_line(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+|'[^']*'", "…", text.strip())[:200]
