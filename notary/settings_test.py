"""Test settings: the real settings, pointed at PostgreSQL and Redis unless told otherwise."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/interlock")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
# Counters live in Redis between tests: only the throttle's own test should ever reach a limit.
os.environ.setdefault("NOTARY_AUTH_FAILURES_PER_MINUTE", "100000")

from notary.settings import *  # noqa: F403
from notary.settings import DATABASES

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Each test's database starts empty, and so must the notary's memory of what it signed:
# tests/conftest.py gives each test its own, a process started with these settings its own (a
# setting, not the environment, which processes a test starts would share); never the one
# beside a real key.
NOTARY_SIGNED_HEADS_FILE = os.environ.get("NOTARY_SIGNED_HEADS_FILE") or os.path.join(
    tempfile.mkdtemp(), "signed-heads.json"
)

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # transactional_db tests end in a TRUNCATE of every table, which the ledger refuses
    # (migration ledger 0003) unless the session allows it.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c ledger.allow_truncate=on"
