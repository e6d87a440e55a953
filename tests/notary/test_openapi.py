"""The OpenAPI schema: served without credentials, complete (every view described, no warning),
declaring the bearer scheme; the docs page is served from the notary itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient


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
