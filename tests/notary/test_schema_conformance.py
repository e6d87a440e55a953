"""The served OpenAPI schema against the notary, both ways, by schemathesis: every operation
fuzzed with each role's key and with none (valid and invalid requests, against generated ids and
records that exist), and the webhook receiver with bodies signed by each provider's own library.
Each answer is checked by schemathesis' conformance checks:

- `not_a_server_error`: no 5xx;
- `status_code_conformance`: no status the schema does not document for the operation;
- `content_type_conformance`, `response_schema_conformance`: the body is what the schema says,
  errors included;
- `negative_data_rejection`: a request the schema says is invalid is refused (no constraint
  the schema states and the server does not enforce);
- `positive_data_acceptance`: a request the schema says is valid is not refused as malformed
  (400), where the schema can say what valid is: see SEMANTIC for the operations whose validity
  depends on records and hashes no JSON Schema can state;

and by two of the notary's own: every 4xx is `{"error": code, "detail": ...}`, and a refused
request (4xx) leaves the tenant's ledger as it was.

Not stateful (schemathesis' links): a generated proposal is never a valid one (its effect id is
a hash of its case, target and action, its payload_hash the SHA-256 of its payload), so chains of
generated requests stop at the first step; instead the fixture makes the records the deeper
states are about (a dispatched effect, a live lease, a signed checkpoint, webhook endpoints) and
operations are also fuzzed against those."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core import NotSet
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from ledger.keys import load_signing_key
from ledger.models import Entry
from notary import services
from notary.models import Tenant
from notary.wsgi import application
from testkit.schema_records import ROLES, SchemaRecords, schema_records
from testkit.webhook_signing import as_headers, new_secret, signed_headers
from webhooks import services as webhook_services

pytestmark = pytest.mark.django_db(transaction=True)

ADMITTED_EXAMPLES = 25  # per operation, mode and source of ids, for a role the operation admits
REFUSED_EXAMPLES = 4  # for a role it refuses (403) or no key (401): the refusal is what counts
WEBHOOK_EXAMPLES = 40  # per provider and mode, under WEBHOOK_UNVERIFIED_PER_MINUTE (60)
WEBHOOK_PATH = "/webhooks/{endpoint_id}/"

# Operations whose valid requests the schema cannot tell from invalid ones: a 400 of a request
# valid by the schema is the server's rule about records and hashes, not an undocumented one.
SEMANTIC = {
    "POST /v1/effects": "the effect id and payload_hash are hashes of the proposal",
    "POST /v1/effects/{effect_id}/outcome": "what an agent may claim follows from the entries",
    "POST /v1/effects/{effect_id}/dispatch": "every premise must hold (holds: true)",
    "POST /v1/leases": "request_id alone, or the terms with requested_by, an agent's holder",
    "POST /v1/leases/from-mandate": "the mandate is a signed SD-JWT: its signature is a record",
    "POST /v1/lease-requests": "expires_at must be in the future",
    "POST /v1/targets": "the claims must agree (tier 2 is queryable, a key window is tier 1's)",
    "POST /v1/attestations": "stage or performed, and agreeing",
    "POST /v1/leases/{lease_id}/revoke": "a lease is revoked once",
    "GET /v1/proofs/inclusion": "index < size",
    "GET /v1/proofs/consistency": "old <= new, new a size the log has reached",
    "GET /v1/exports/receipts": "from and to are datetimes with a time zone",
    "POST /v1/targets/{name}/reconcile": "since before until, at most 31 days, ending by now",
}

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture
def notary(signing_key_file: Path) -> SchemaRecords:
    return schema_records("schema-conformance", signer=load_signing_key(signing_key_file))


@pytest.fixture
def schema() -> Any:
    return schemathesis.openapi.from_wsgi("/v1/schema/", application)


class Findings:
    """Every distinct failure (by operation, check and status), with one request that shows
    it, and how many requests got which status."""

    def __init__(self) -> None:
        self.failures: dict[tuple[str, str, int], str] = {}
        self.statuses: Counter[tuple[str, int]] = Counter()

    def record(
        self, case: Any, response: Any, headers: dict[str, str], problems: list[str]
    ) -> None:
        self.statuses[case.operation.label, response.status_code] += 1
        for problem in problems:
            key = (case.operation.label, problem.splitlines()[0][:120], response.status_code)
            if key not in self.failures:
                curl = case.as_curl_command(headers=headers)
                body = response.text[:300]
                self.failures[key] = f"{key[0]} -> {key[2]}: {problem}\n  {curl}\n  {body}"

    def report(self) -> str:
        lines = [f"{sum(self.statuses.values())} requests, {len(self.failures)} failures"]
        lines += [f"  FAILED {label} {status}: {what}" for label, what, status in self.failures]
        lines += [
            f"  {label}: {status} x{n}" for (label, status), n in sorted(self.statuses.items())
        ]
        return "\n".join(lines)


def wire_bytes(body: Any) -> bytes:
    """The body as sent, the bytes a signature covers: a negative case's may be no JSON."""
    if isinstance(body, NotSet):
        return b""
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def ledger_size(tenant: Tenant) -> int:
    return Entry.objects.filter(log=tenant.log).count()


def own_checks(response: Any, before: int, after: int) -> list[str]:
    """The notary's promises about refusals: the error shape, and nothing written."""
    problems = []
    if 400 <= response.status_code < 500:
        try:
            body = json.loads(response.content)
        except ValueError:
            body = None
        if not (isinstance(body, dict) and isinstance(body.get("error"), str) and "detail" in body):
            problems.append("error_shape: a 4xx body is not {error, detail}")
        if after != before:
            problems.append(f"ledger_unchanged: a refused request wrote {after - before} entries")
    return problems


def conformance(case: Any, response: Any, headers: dict[str, str], positive: bool) -> list[str]:
    checks = [*CHECKS, positive_data_acceptance] if positive else CHECKS
    try:
        case.validate_response(response, checks=checks, headers=headers)
    except FailureGroup as group:
        return [f"{type(f).__name__}: {f.title}: {f.message}".strip() for f in group.exceptions]
    return []


def run(
    strategy: Any,
    examples: int,
    call: Callable[[Any], tuple[Any, dict[str, str]]],
    tenant: Tenant,
    findings: Findings,
    positive: bool,
) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def exercise(case: Any) -> None:
        before = ledger_size(tenant)
        response, headers = call(case)
        problems = conformance(case, response, headers, positive)
        problems += own_checks(response, before, ledger_size(tenant))
        findings.record(case, response, headers, problems)

    with contextlib.suppress(Unsatisfiable):  # nothing to make invalid: no negative cases
        exercise()


def admits(operation: Any, fixture: SchemaRecords, role: str) -> bool:
    """Whether a bare request with this role's key gets past the permission check."""
    names = {p.name for p in operation.path_parameters}
    bare = operation.Case(path_parameters={name: fixture.ids[name] for name in names})
    response = bare.call(headers={"Authorization": f"Bearer {fixture.tokens[role]}"})
    return response.status_code not in (401, 403)


MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)


@pytest.mark.parametrize("role", [*ROLES, "anonymous"])
def test_the_api_conforms_to_its_schema(notary: SchemaRecords, schema: Any, role: str) -> None:
    findings = Findings()
    headers = {} if role == "anonymous" else {"Authorization": f"Bearer {notary.tokens[role]}"}
    schema.config.update(headers=headers)  # the key as schemathesis' own: never negated
    operations = [
        result.ok() for result in schema.get_all_operations() if result.ok().path != WEBHOOK_PATH
    ]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        admitted = role != "anonymous" and admits(operation, notary, role)
        examples = ADMITTED_EXAMPLES if admitted else REFUSED_EXAMPLES
        names = {p.name for p in operation.path_parameters}
        sources: list[dict[str, str] | None] = [None]  # generated ids: mostly "not found"
        if names and admitted:
            sources.append({name: notary.ids[name] for name in names})  # records that exist
        for mode in MODES:
            positive = mode.is_positive and operation.label not in SEMANTIC
            for path_parameters in sources:
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path_parameters
                )
                run(
                    strategy,
                    examples,
                    lambda case: (case.call(), headers),
                    notary.tenant,
                    findings,
                    positive,
                )
    print(f"\n{role}: {findings.report()}")
    assert not findings.failures, "\n\n".join(findings.failures.values())


@pytest.mark.parametrize("provider", ["stripe", "resend", "standard"])
def test_the_webhook_receiver_conforms_with_signed_bodies(
    notary: SchemaRecords, schema: Any, provider: str
) -> None:
    """Generated bodies, each signed by the provider's own library over the exact bytes sent:
    the answers past the signature check are held to the schema as the API's are."""
    secret = new_secret(provider)
    target = services.target_register(
        tenant=notary.tenant,
        name=f"hooks-{provider}",
        tier=3,
        queryable=False,
        max_inflight=timedelta(seconds=5),
    )
    standard = provider == "standard"  # its events have no fixed shape: say where the id is
    endpoint = webhook_services.endpoint_create(
        tenant=notary.tenant,
        target=target,
        provider=provider,
        secrets=[secret],
        effect_id_path="data.effect_id" if standard else "",
        positive_types=["sent"] if standard else [],
    )
    operation = schema[WEBHOOK_PATH]["POST"]
    findings = Findings()
    sent = Counter[str]()

    def signed_call(case: Any) -> tuple[Any, dict[str, str]]:
        sent["n"] += 1
        if (
            provider == "stripe"
            and isinstance(case.body, dict)
            and case.meta.generation.mode.is_positive
        ):
            case.body = {**case.body, "id": f"evt_{sent['n']}"}  # a Stripe event names itself
        raw = wire_bytes(case.body)
        try:
            signed = signed_headers(provider, raw, secret, event_id=f"msg_{sent['n']}_{provider}")
        except UnicodeDecodeError:  # the libraries sign text: bytes that are none go unsigned
            signed = {}
        headers = {**as_headers(signed), "content-type": "application/json"}
        return case.call(data=raw, headers=headers), headers

    for mode in MODES:
        strategy = operation.as_strategy(
            generation_mode=mode, path_parameters={"endpoint_id": str(endpoint.public_id)}
        )
        run(strategy, WEBHOOK_EXAMPLES, signed_call, notary.tenant, findings, mode.is_positive)
    print(f"\n{provider}: {findings.report()}")
    assert findings.statuses[operation.label, 200] > 0  # signed events got through
    assert not findings.failures, "\n\n".join(findings.failures.values())
