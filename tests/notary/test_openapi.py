"""The OpenAPI schema: served without credentials, complete (every view described, no warning),
declaring the bearer scheme; the docs page is served from the notary itself."""

from __future__ import annotations

from pathlib import Path

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
