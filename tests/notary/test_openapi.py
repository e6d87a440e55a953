"""The OpenAPI schema: served without credentials, complete (every view described, no warning),
declaring the bearer scheme; the docs page is served from the notary itself.

What it says is held to the code: the roles each operation names are the roles the server
admits (asked with a key of each), every error code it documents is one the code raises, every
example is valid by its own schema, and the request examples are what the gate's client sends
and are accepted by a live notary."""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import rest_framework.exceptions
import yaml
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.management import call_command
from django.core.validators import URLValidator
from django.test import Client
from django.utils import timezone
from jsonschema import Draft4Validator, FormatChecker  # type: ignore[import-untyped]
from rest_framework.test import APIClient

from gate_client.notary_journal import NotaryJournal
from ledger.core.entries import genesis_hash
from notary import schema as examples
from notary import services
from notary.models import Role
from testkit.factories import client_for, leased, register
from testkit.webhook_signing import as_headers, new_secret, signed_headers
from webhooks import providers
from webhooks import services as webhook_services
from webhooks.models import Refusal

ROOT = Path(__file__).resolve().parents[2]


def test_the_schema_generates_with_no_warning_and_validates(tmp_path: Path) -> None:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "ik_<key id>_<secret>",
    }
    assert {"/v1/effects", "/v1/effects/{effect_id}/dispatch", "/v1/leases"} <= set(schema["paths"])


def _schema(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    return dict(yaml.safe_load(out.read_text()))


def _operations(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{method.upper()} {path}": operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }


def test_every_operation_documents_its_refusals_in_the_error_shape(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    error = schema["components"]["schemas"]["ErrorOutput"]
    assert set(error["required"]) == {"error", "detail"}
    for label, operation in _operations(schema).items():
        statuses = set(operation["responses"])
        if any(operation.get("security", [])):  # a key is required
            assert {"401", "429"} <= statuses, label
        if "requestBody" in operation:
            assert set(operation["requestBody"]["content"]) == {"application/json"}, label
            assert {"400", "413"} <= statuses, label
        if any(p["in"] == "path" for p in operation.get("parameters", [])):
            assert "404" in statuses, label
        for status, answer in operation["responses"].items():
            if status.startswith("4"):
                [content] = answer["content"].values()
                ref = content["schema"]["$ref"]
                assert ref.rsplit("/", 1)[-1] in {"ErrorOutput", "ConflictOutput"}, (label, status)
    assert not any(_operations(schema)["GET /v1/keys"].get("security", []))
    assert "401" not in _operations(schema)["GET /v1/keys"]["responses"]
    webhook = _operations(schema)["POST /webhooks/{endpoint_id}/"]
    assert set(webhook["responses"]) == {"200", "400", "404", "413", "429"}


def test_the_schema_states_the_constraints_the_server_enforces(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    components = schema["components"]["schemas"]
    operations = _operations(schema)
    [limit] = operations["GET /v1/effects/unsettled"]["parameters"]
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 10_000)
    [receipt_hash] = [
        p
        for p in operations["GET /v1/effects/{effect_id}/receipt"]["parameters"]
        if p["name"] == "payload_hash"
    ]
    assert receipt_hash["schema"]["pattern"] == "^[0-9a-f]{64}$"
    inclusion = {p["name"]: p for p in operations["GET /v1/proofs/inclusion"]["parameters"]}
    assert inclusion["index"]["schema"]["minimum"] == 0
    assert "less than" in operations["GET /v1/proofs/inclusion"]["description"]
    assert "not be greater" in operations["GET /v1/proofs/consistency"]["description"]
    lease = components["LeaseGrantInputRequest"]["properties"]
    assert lease["payload_hash"]["pattern"] == "^[0-9a-f]{64}$"
    assert (lease["case_id"]["maxLength"], lease["action"]["maxLength"]) == (200, 100)
    assert lease["limits"]["additionalProperties"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 2**53 - 1,
    }
    proposal = components["ProposalShapeRequest"]
    assert proposal["additionalProperties"] is False
    assert proposal["properties"]["target"]["maxLength"] == 63
    assert proposal["properties"]["lease_id"]["maxLength"] == 100
    dispatch = components["EffectDispatchInputRequest"]["properties"]
    assert dispatch["attempt"]["minimum"] == 1
    outcome = components["EffectOutcomeInputRequest"]["properties"]
    assert outcome["body"]["properties"]["result_ref"]["maxLength"] == 255
    assert set(components["KindEnum"]["enum"]) == {"AMBIGUOUS", "COMMITTED", "FAILED", "REFUSED"}
    target = components["TargetInputRequest"]["properties"]
    assert (target["tier"]["minimum"], target["tier"]["maximum"]) == (1, 3)
    text = yaml.safe_dump(schema)
    assert "multipart/form-data" not in text
    assert "application/x-www-form-urlencoded" not in text


@pytest.mark.django_db
def test_schema_and_docs_are_served_without_credentials() -> None:
    client = APIClient()
    schema = client.get("/v1/schema/")
    assert schema.status_code == 200
    assert b"/v1/effects/{effect_id}/receipt" in schema.content
    docs = client.get("/v1/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content
    head = docs.content.split(b"<body")[0].replace(b"http://testserver", b"")
    assert b"://" not in head  # scripts and styles come from this notary, not a CDN


# --- what the schema says is what the code does ---------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _schema(tmp_path_factory.mktemp("schema"))


def _documented_roles(operation: dict[str, Any]) -> set[str] | None:
    """The roles the description names; None: it says no key is needed."""
    [line] = [
        line
        for line in operation["description"].splitlines()
        if line.startswith(examples.ROLES_LABEL)
    ]
    if line.startswith(f"{examples.ROLES_LABEL} none needed"):
        return None
    return set(re.findall(r"`([a-z]+)`", line))


def test_every_operation_has_a_summary_a_description_and_its_roles(
    generated: dict[str, Any],
) -> None:
    operations = _operations(generated)
    assert len(operations) >= 23, sorted(operations)
    for label, operation in operations.items():
        assert operation.get("summary", "").strip(), label
        own = operation["description"].split(examples.ROLES_LABEL)[0].strip()
        assert len(own) > 40, (label, own)  # what it does and why, before the generated lines
        roles = _documented_roles(operation)
        assert roles is None or (roles and roles <= set(Role.values)), (label, roles)
        assert (roles is None) == (not any(operation.get("security", []))), label


def _path_for(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "nothing-here", path)


@pytest.mark.django_db
def test_the_roles_named_are_the_roles_the_server_admits(generated: dict[str, Any]) -> None:
    """Each operation, asked with a key of each role and with none: a role refused with 403
    `permission_denied` is exactly a role the description does not name."""
    tenant = services.tenant_create(slug="roles", name="Roles")
    clients = {role: client_for(tenant, role, f"{role}-holder") for role in Role.values}
    clients["none"] = APIClient()
    for label, operation in _operations(generated).items():
        method, path = label.split(" ", 1)
        roles = _documented_roles(operation)
        for role, client in clients.items():
            answer = getattr(client, method.lower())(_path_for(path), {}, format="json")
            refused = answer.status_code == 403 and answer.json()["error"] == "permission_denied"
            if role == "none":
                assert (answer.status_code == 401) == (roles is not None), (label, answer.json())
            elif roles is not None:
                assert refused == (role not in roles), (label, role, answer.status_code)


def _code_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" assignments."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }


RAISERS = {
    "NotaryConflict",
    "NotaryDependencyFailed",
    "NotaryForbidden",
    "WebhookRefused",
    "_BodyRefused",
    "_error",
}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _first_text(call: ast.Call, constants: dict[str, str]) -> set[str]:
    """The first string argument, given or by a module constant's name."""
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return {arg.value}
        if isinstance(arg, ast.Name) and arg.id in constants:
            return {constants[arg.id]}
    return set()


def _answered_code(call: ast.Call) -> set[str]:
    """The code of a `Response({"error": code, ...})` or JsonResponse."""
    if _called(call) not in {"Response", "JsonResponse"} or not call.args:
        return set()
    body = call.args[0]
    if not isinstance(body, ast.Dict):
        return set()
    codes = set()
    for key, value in zip(body.keys, body.values, strict=True):
        is_error = isinstance(key, ast.Constant) and key.value == "error"
        if is_error and isinstance(value, ast.Constant) and isinstance(value.value, str):
            codes.add(value.value)
    return codes


def _raised_codes(tree: ast.Module) -> set[str]:
    """The error codes the module's code raises or answers: the code argument of the notary's
    and the webhook receiver's refusals (a subclass's too, to its __init__), and the
    `{"error": code}` bodies it responds with."""
    constants = _code_constants(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    codes = set().union(*(_answered_code(call) for call in calls))
    codes |= set().union(*(_first_text(c, constants) for c in calls if _called(c) in RAISERS))
    for klass in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        if {b.id for b in klass.bases if isinstance(b, ast.Name)} & RAISERS:
            for call in [n for n in ast.walk(klass) if isinstance(n, ast.Call)]:
                if _called(call) == "__init__":
                    codes |= _first_text(call, constants)
    return codes


# The modules that document refusals (their examples name codes; they raise none of their own).
DOCUMENTING = {"notary/schema.py", "notary/views.py", "ledger/api/schema.py", "ledger/api/views.py"}
# Codes the code defines that no operation answers, and why.
ANSWERED_BY_NO_OPERATION = {
    "not_ambiguous": "effect_resolve refuses it: a person's decision, made in the admin",
    "method_not_allowed": "405 to a method the path does not have: no operation's answer",
    "not_acceptable": "406 to an Accept header that admits no JSON, from DRF's negotiation",
    "error": "DRF's APIException default: nothing here raises a bare APIException",
}


def defined_codes() -> set[str]:
    """Every `error` code the code can answer with, read from the code itself."""
    codes = {
        klass.default_code
        for klass in vars(rest_framework.exceptions).values()
        if isinstance(klass, type) and issubclass(klass, rest_framework.exceptions.APIException)
    }
    codes |= set(Refusal.values)  # the quarantine's reasons are the receiver's 400 codes
    for package in ("notary", "ledger", "webhooks"):
        for source in (ROOT / package).rglob("*.py"):
            relative = source.relative_to(ROOT).as_posix()
            if "/migrations/" in relative or relative in DOCUMENTING:
                continue
            codes |= _raised_codes(ast.parse(source.read_text()))
    return codes


def _media_examples(answer: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    for media_type, media in answer.get("content", {}).items():
        for name, example in media.get("examples", {}).items():
            yield media_type, media["schema"], (name, example)


def test_every_documented_error_code_is_one_the_code_defines(generated: dict[str, Any]) -> None:
    defined = defined_codes()
    assert {"attempt_taken", "lease_refused", "beyond_policy", "too_large", "throttled"} <= defined
    documented: set[str] = set()
    for label, operation in _operations(generated).items():
        by_status: dict[str, list[str]] = {}
        for status, answer in operation["responses"].items():
            if not status.startswith("4"):
                continue
            refusals = [example["value"] for _, _, (_, example) in _media_examples(answer)]
            assert refusals, (label, status, "a refusal with no example")
            codes = [value["error"] for value in refusals]
            listed = re.findall(r"^- `([a-z_]+)`", answer["description"], re.MULTILINE)
            assert listed == codes, (label, status, answer["description"])
            by_status[status] = list(dict.fromkeys(codes))
            documented |= set(codes)
        errors = " ".join(
            line
            for line in operation["description"].splitlines()
            if line.startswith(examples.ERRORS_LABEL)
        )
        for status, codes in by_status.items():
            assert f"{status} " + ", ".join(f"`{c}`" for c in codes) in errors, (label, status)
    assert documented <= defined, documented - defined
    assert defined - documented == set(ANSWERED_BY_NO_OPERATION), defined - documented


def _json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema (draft 4, whose exclusiveMinimum is a boolean as
    OpenAPI 3.0's is): `nullable` becomes a null alternative."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


FORMATS = FormatChecker()  # jsonschema's, with `uri` (its own needs a package not installed)


def _is_uri(value: object) -> bool:
    if isinstance(value, str):
        URLValidator()(value)
    return True


FORMATS.checks("uri", raises=DjangoValidationError)(_is_uri)


def _validator(schema: dict[str, Any], document: dict[str, Any]) -> Draft4Validator:
    components = _json_schema(document["components"])
    root = {"allOf": [_json_schema(schema)], "components": components}
    return Draft4Validator(root, format_checker=FORMATS)


def _problems(validator: Draft4Validator, value: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)
    ]


def test_every_operation_with_a_body_has_examples_valid_by_its_schemas(
    generated: dict[str, Any],
) -> None:
    """Every request example validates against its request schema, every response example
    (errors included) against its response's."""
    checked = 0
    for label, operation in _operations(generated).items():
        if "requestBody" in operation:
            for media_type, media in operation["requestBody"]["content"].items():
                assert media.get("examples"), (label, media_type, "a body with no example")
        answers = [operation.get("requestBody", {}), *operation["responses"].values()]
        for answer in answers:
            for media_type, schema, (name, example) in _media_examples(answer):
                if media_type != "application/json":
                    continue
                problems = _problems(_validator(schema, generated), example["value"])
                assert not problems, (label, name, problems)
                checked += 1
    assert checked > 100


def _request_example(schema: dict[str, Any], label: str, name: str) -> dict[str, Any]:
    operation = _operations(schema)[label]
    value: dict[str, Any] = operation["requestBody"]["content"]["application/json"]["examples"][
        name
    ]["value"]
    return copy.deepcopy(value)


def _response_example(schema: dict[str, Any], label: str, status: str, name: str) -> Any:
    answer = _operations(schema)[label]["responses"][status]
    return answer["content"]["application/json"]["examples"][name]["value"]


def test_the_propose_example_is_what_the_gate_sends_and_its_answer_what_it_reads(
    generated: dict[str, Any],
) -> None:
    """NotaryJournal.propose_and_dispatch, given the demo's refund, posts the example exactly;
    answered with the example answer, it reads it (each entry's hash checked against its
    leaf bytes) as attempt 1 dispatched."""
    label = "POST /v1/effects"
    sent: list[Any] = []

    def notary(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        answer = _response_example(generated, label, "201", "ProposedAndDispatched")
        return httpx.Response(201, json=answer)

    refund = examples.REFUND
    with NotaryJournal("http://notary.test", "ik_x_y", transport=httpx.MockTransport(notary)) as j:
        started = j.propose_and_dispatch(
            effect_id=refund.effect_id,
            body=examples.PROPOSED_BODY,
            request=examples.FIRST_DISPATCH,
        )
    assert sent == [_request_example(generated, label, "ProposeAndDispatch")]
    assert started is not None
    entries, dispatched = started
    assert [e.kind for e in entries] == ["PROPOSED", "DISPATCHED"]
    assert dispatched is not None and dispatched.body_value()["attempt"] == 1


@pytest.fixture
def shop() -> Any:
    """The demo's tenant, as the examples name it: its payments target and refund-bot's key."""
    tenant = services.tenant_create(slug=examples.EXAMPLE_TENANT, name="A shop")
    register(
        tenant,
        examples.EXAMPLE_TARGET,
        tier=1,
        queryable=True,
        key_window=timedelta(hours=24),
        max_inflight=timedelta(seconds=2),
        money=examples.TARGET_PAYMENTS["money"],
    )
    return tenant


@pytest.mark.django_db
def test_the_propose_example_is_accepted_as_it_stands(generated: dict[str, Any], shop: Any) -> None:
    """Posted verbatim with a real agent key: proposed (201); its lease id names no lease here,
    so the lease refuses the dispatch, and the answer says so."""
    agent = client_for(shop, "agent", examples.EXAMPLE_AGENT)
    body = _request_example(generated, "POST /v1/effects", "ProposeAndDispatch")
    answer = agent.post("/v1/effects", body, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["dispatch_refused"] == {"reason": "lease_scope", "detail": "no such lease"}


@pytest.mark.django_db
def test_the_propose_example_dispatches_under_a_live_lease(
    generated: dict[str, Any], shop: Any
) -> None:
    """Under a live lease of the example's terms (its id put in): PROPOSED and DISPATCHED
    attempt 1 in one request, the entries' bodies those of the example answer."""
    agent = client_for(shop, "agent", examples.EXAMPLE_AGENT)
    lease = leased(
        shop,
        "case_4711",
        "refund",
        requested_by=examples.EXAMPLE_AGENT,
        limits={"amount_cents": 2000},
    )
    body = _request_example(generated, "POST /v1/effects", "ProposeAndDispatch")
    body["proposal"]["lease_id"] = lease.lease_id
    answer = agent.post("/v1/effects", body, format="json")
    assert answer.status_code == 201, answer.json()
    shown = answer.json()
    assert shown["dispatch_refused"] is None and shown["dispatched"]["body"]["attempt"] == 1
    expected = _response_example(generated, "POST /v1/effects", "201", "ProposedAndDispatched")
    for got, example in zip(shown["entries"], expected["entries"], strict=True):
        assert got["kind"] == example["kind"]
        assert {**got["body"], "lease_id": None} == {**example["body"], "lease_id": None}


@pytest.mark.django_db
def test_the_other_request_examples_are_accepted_in_the_demo_s_order(
    generated: dict[str, Any], shop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease, target, effect and attestation examples posted as the demo goes, at the time
    they were written for (the lease runs an hour from then): each is a 2xx. Ids the notary
    makes at random (request, lease) are put in where a later example names them."""
    monkeypatch.setattr(timezone, "now", lambda: examples.EXAMPLE_AT)
    approver = client_for(shop, "approver", examples.EXAMPLE_APPROVER)
    agent = client_for(shop, "agent", examples.EXAMPLE_AGENT)
    service = client_for(shop, "service", "payments-service", targets=[examples.EXAMPLE_TARGET])

    def post(client: APIClient, path: str, label: str, example: str, **put: Any) -> Any:
        body = {**_request_example(generated, label, example), **put}
        answer = client.post(path, body, format="json")
        assert 200 <= answer.status_code < 300, (label, example, answer.json())
        return answer.json()

    other = post(approver, "/v1/targets", "POST /v1/targets", "Payments", name="payments-2")
    assert other["tier"] == 1
    asked = post(agent, "/v1/lease-requests", "POST /v1/lease-requests", "Refund")
    lease = post(
        approver, "/v1/leases", "POST /v1/leases", "GrantRequest", request_id=asked["request_id"]
    )
    post(approver, "/v1/leases", "POST /v1/leases", "GrantTerms")
    proposal = _request_example(generated, "POST /v1/effects", "ProposeOnly")
    proposal["proposal"]["lease_id"] = lease["lease_id"]
    assert agent.post("/v1/effects", proposal, format="json").status_code == 201
    effect = f"/v1/effects/{proposal['effect_id']}"
    post(agent, f"{effect}/dispatch", "POST /v1/effects/{effect_id}/dispatch", "First")
    attested = post(service, "/v1/attestations", "POST /v1/attestations", "BeforeActing")
    assert attested["settled"] == "acknowledged"
    post(agent, f"{effect}/outcome", "POST /v1/effects/{effect_id}/outcome", "Committed")
    post(service, "/v1/attestations", "POST /v1/attestations", "Performed")
    revoke = f"/v1/leases/{lease['lease_id']}/revoke"
    revoked = post(approver, revoke, "POST /v1/leases/{lease_id}/revoke", "Withdrawn")
    assert revoked["revoked_by"] == examples.EXAMPLE_APPROVER
    assert settings.NOTARY_ORIGIN in agent.get("/v1/whoami").json()["log"]


def test_the_examples_are_the_demo_s_walkthrough() -> None:
    """The examples' PROPOSED and DISPATCHED entries chain from the log's genesis, as sealed."""
    assert examples.GRANTED.prev_hash == genesis_hash(examples.EXAMPLE_ORIGIN)
    for before, after in zip(
        [examples.GRANTED, examples.PROPOSED, examples.DISPATCHED],
        [examples.PROPOSED, examples.DISPATCHED, examples.COMMITTED],
        strict=True,
    ):
        assert after.prev_hash == before.entry_hash and after.seq == before.seq + 1


@pytest.mark.django_db
def test_the_webhook_example_is_accepted_and_read_as_the_refund_s_evidence(
    generated: dict[str, Any], shop: Any
) -> None:
    """Signed by Stripe's own library for an endpoint of the demo's target: a 200, and read as
    evidence that the demo's refund was performed, under the refund's id."""
    label = "POST /webhooks/{endpoint_id}/"
    event = _request_example(generated, label, "StripeRefund")
    secret = new_secret("stripe")
    target = shop.targets.get(name=examples.EXAMPLE_TARGET)
    endpoint = webhook_services.endpoint_create(
        tenant=shop, target=target, provider="stripe", secrets=[secret]
    )
    raw = json.dumps(event).encode()
    answer = Client().post(
        f"/webhooks/{endpoint.public_id}/",
        raw,
        content_type="application/json",
        headers=as_headers(signed_headers("stripe", raw, secret)),
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"received": event["id"], "duplicate": False}
    seen = providers.PROVIDERS["stripe"].observe(providers.Verified(event["id"], event))
    assert (seen.effect_id, seen.outcome) == (examples.REFUND.effect_id, providers.PERFORMED)
    assert seen.result_ref == examples.EXAMPLE_RESULT_REF
