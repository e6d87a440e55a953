from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import LazySettings
from hypothesis import settings as hypothesis_settings

from ledger import services
from ledger.core.note import Signer
from ledger.keys import write_signing_key
from ledger.models import Log
from notary import services as notary_services
from notary.models import Tenant

# Shared, noisy machines: a slow example is not a failure; only a wrong one is.
hypothesis_settings.register_profile("interlock", deadline=None)
hypothesis_settings.load_profile("interlock")


@pytest.fixture(autouse=True)
def signed_heads_file(tmp_path: Path, settings: LazySettings) -> Path:
    """A memory of signed heads of this test's own (its database is its own too)."""
    path = tmp_path / "signed-heads.json"
    settings.NOTARY_SIGNED_HEADS_FILE = str(path)
    return path


@pytest.fixture
def signing_key_file(tmp_path: Path, settings: LazySettings) -> Path:
    """A fresh notary signing key, installed as NOTARY_SIGNING_KEY_FILE for this test."""
    path = tmp_path / "signing.key"
    write_signing_key(path=path, name="test.interlock.example")
    settings.NOTARY_SIGNING_KEY_FILE = path
    return path


@pytest.fixture
def signer(signing_key_file: Path) -> Signer:
    from ledger.keys import load_signing_key

    return load_signing_key(signing_key_file)


@pytest.fixture
def make_log(db: None) -> Callable[[], Log]:
    def make() -> Log:
        return services.ensure_log(origin=f"test.interlock.example/{secrets.token_hex(6)}")

    return make


@pytest.fixture
def log(make_log: Callable[[], Log]) -> Log:
    return make_log()


@pytest.fixture
def acme(db: None) -> Tenant:
    return notary_services.tenant_create(slug="acme", name="Acme Refunds")


@pytest.fixture
def globex(db: None) -> Tenant:
    return notary_services.tenant_create(slug="globex", name="Globex")
