from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import LazySettings
from django.db import connection
from hypothesis import settings as hypothesis_settings

from ledger import services
from ledger.core.note import Signer
from ledger.keys import write_signing_key
from ledger.models import Log

REPO_ROOT = Path(__file__).resolve().parent.parent

# Shared, noisy machines: a slow example is not a failure; only a wrong one is.
hypothesis_settings.register_profile("interlock", deadline=None)
hypothesis_settings.load_profile("interlock")


def child_database_url() -> str:
    """The test database this process is connected to, as a child process's DATABASE_URL."""
    db = connection.settings_dict
    auth = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


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
