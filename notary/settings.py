"""The one settings module. Everything comes from environment variables; the defaults are the
embedded mode (SQLite under var/, Celery eager, no servers) so a fresh clone runs as it is."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from ledger.core.cosignature import CosignatureError, parse_cosigner_vkey

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_secret(name: str, default: str) -> str:
    """NAME, or the contents of the file NAME_FILE names (a Docker or Kubernetes secret), never
    both: a secret need not sit in the process environment."""
    path = os.environ.get(f"{name}_FILE")
    if path is None:
        return env_str(name, default)
    if name in os.environ:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {exc}") from exc
    if not value:
        raise ImproperlyConfigured(f"{name}_FILE: {path} is empty")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean")


def read_lines(path: str) -> list[str]:
    """The non-empty lines of a file that is not '#' comments; none for an empty path."""
    if not path:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ImproperlyConfigured(f"cannot read {path}: {exc}") from exc
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def parse_witnesses(text: str) -> list[tuple[str, str]]:
    """`URL VKEY, URL VKEY, ...` as (url, vkey) pairs; each vkey a cosignature/v1 key."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        url, _, vkey = item.partition(" ")
        try:
            parse_cosigner_vkey(vkey.strip())
        except CosignatureError as exc:
            raise ImproperlyConfigured(f"LEDGER_WITNESSES: {item!r}: {exc}") from exc
        if not url.startswith(("http://", "https://")):
            raise ImproperlyConfigured(f"LEDGER_WITNESSES: {url!r} is not an http(s) URL")
        pairs.append((url.rstrip("/"), vkey.strip()))
    return pairs


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc


VAR_DIR = Path(env_str("NOTARY_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", True)
_DEV_SECRET_KEY = "dev-only-insecure-secret-key-never-use-in-production"
SECRET_KEY = env_secret("SECRET_KEY", _DEV_SECRET_KEY)
if not DEBUG and SECRET_KEY == _DEV_SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
# The admin's login form behind a TLS proxy: the origins it is reached at, e.g.
# https://notary.example.com (Django checks a form's Origin against them).
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
if env_bool("NOTARY_BEHIND_TLS_PROXY", False):
    # The proxy terminates TLS and says so in X-Forwarded-Proto (it must strip the client's).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if env_bool("NOTARY_HTTPS", False):
    # Served over HTTPS only: cookies never go in clear, plain HTTP is redirected (but for the
    # health check, which a load balancer asks over HTTP), and browsers are told to remember.
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ledger",
    "notary",
    "webhooks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The admin's and Swagger UI's static files, from STATIC_ROOT (collectstatic) in production.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "notary.urls"
WSGI_APPLICATION = "notary.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_EMBEDDED_DATABASE_URL = f"sqlite:///{VAR_DIR / 'notary.sqlite3'}"
DATABASE_URL = env_secret("DATABASE_URL", _EMBEDDED_DATABASE_URL)
if DATABASE_URL == _EMBEDDED_DATABASE_URL:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
# Health checks: a connection PostgreSQL dropped (a restart) is replaced, not a 500.
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
if "DATABASE_PASSWORD" in os.environ or "DATABASE_PASSWORD_FILE" in os.environ:
    # The password apart from the URL, e.g. from the secret file PostgreSQL's image reads too.
    DATABASES["default"]["PASSWORD"] = env_secret("DATABASE_PASSWORD", "")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes SQLite's write lock at BEGIN, so two appenders queue instead of failing
    # to upgrade a read lock; WAL lets readers run beside the one writer.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("NOTARY_STATIC_ROOT", str(VAR_DIR / "static")))
# With DEBUG off the files are served compressed under content-hashed names from STATIC_ROOT,
# which `manage.py collectstatic` fills (the image does it when it is built).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# In development WhiteNoise finds the files in the apps, as runserver does (fixed here, as
# settings are read, so a test runner that turns DEBUG off later changes nothing).
WHITENOISE_AUTOREFRESH = WHITENOISE_USE_FINDERS = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["notary.authentication.BearerApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "notary.exceptions.api_exception_handler",
    # JSON bodies only (nothing here takes files or forms, whose parts Django would spool to
    # disk past the body limit); JSON nested past ledger.core.canonical.MAX_DEPTH, or holding a
    # lone surrogate, is a 400; any other media type a 415.
    "DEFAULT_PARSER_CLASSES": ["notary.parsers.BoundedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "UNAUTHENTICATED_USER": None,
    # drf-spectacular's, adding the refusals every operation of a kind answers (401, 413, ...).
    "DEFAULT_SCHEMA_CLASS": "notary.schema.AutoSchema",
}

# The ledger's API (ledger.api) serves any log and knows no tenants: this names the function
# giving the log an authenticated request reads (its tenant's own).
LEDGER_API_CALLER_LOG = "notary.authentication.caller_log"
# What verify_ledger checks beyond the log itself (the ledger imports none of these apps): the
# effects and findings tables against the entries (rebuild_effects --check), and every OBSERVED
# webhook entry's raw event against the digest the entry records.
LEDGER_VERIFY_CHECKS = [
    "ledger.selectors.cosignature_problems",
    "notary.selectors.effect_projection_problems",
    "notary.selectors.finding_projection_problems",
    "webhooks.selectors.observed_evidence_problems",
]

SPECTACULAR_SETTINGS = {
    "TITLE": "Interlock notary",
    "DESCRIPTION": (
        "Receipts for AI agent actions. Every request takes `Authorization: Bearer <API key>`; "
        'every error is `{"error": code, "detail": ...}`. A body over 2.5 MB is a 413 '
        "(`too_large`); JSON nested deeper than 64 arrays and objects is a 400."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from this notary, no outside assets
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # A finding's kind and an outcome's kind are two enums, each with its own stable name.
    "ENUM_NAME_OVERRIDES": {
        "KindEnum": "notary.serializers.OUTCOME_KINDS",
        "FindingKindEnum": "notary.serializers.FINDING_KINDS",
    },
    # The webhook receiver is a plain Django view: its path is added to the schema here.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "notary.schema.add_webhook_receiver",
    ],
}

# Celery: with no REDIS_URL the embedded mode runs every task inline.
REDIS_URL = env_secret("REDIS_URL", "")

# The cache holds the throttles' counters (notary.counters): in Redis, shared by every web
# process, when there is one; per process in the embedded mode. While Redis is unreachable each
# process counts on its own; the short timeouts keep a Redis that stopped answering from
# holding requests.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Bearer tokens that fail to authenticate, per client address per minute, before that address's
# bad tokens are refused (429) for the rest of the minute; a valid key always gets through.
NOTARY_AUTH_FAILURES_PER_MINUTE = env_int("NOTARY_AUTH_FAILURES_PER_MINUTE", 20)
# Proxies (comma-separated addresses or CIDRs) whose X-Forwarded-For names the client; from any
# other peer the header is ignored. Empty: the peer is the client.
NOTARY_TRUSTED_PROXIES = [
    cidr.strip() for cidr in env_str("NOTARY_TRUSTED_PROXIES", "").split(",") if cidr.strip()
]
for _cidr in NOTARY_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_cidr, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"NOTARY_TRUSTED_PROXIES: {_cidr!r} is not a CIDR") from _exc
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes the database connection around every task unless told to reuse
# it; a webhook ingestion is a few milliseconds of SQL, so reconnecting each time halves them.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 100)
CELERY_BEAT_SCHEDULE = {
    "sign-checkpoints": {
        "task": "ledger.tasks.sign_due_checkpoints",
        "schedule": float(env_int("NOTARY_CHECKPOINT_INTERVAL_SECONDS", 60)),
    },
    "sweep-in-flight": {
        "task": "notary.tasks.sweep_in_flight",
        "schedule": float(env_int("NOTARY_SWEEP_INTERVAL_SECONDS", 30)),
    },
    "ingest-stranded-webhooks": {
        "task": "webhooks.tasks.ingest_stranded_events",
        "schedule": float(env_int("NOTARY_SWEEP_INTERVAL_SECONDS", 30)),
    },
    "witness-checkpoints": {
        "task": "ledger.tasks.witness_latest_checkpoints",
        "schedule": float(env_int("NOTARY_CHECKPOINT_INTERVAL_SECONDS", 60)),
    },
    "notify-overdue-reviews": {
        "task": "notary.tasks.notify_overdue_reviews",
        "schedule": 60.0,
    },
    "send-stranded-review-notices": {
        "task": "notary.tasks.send_stranded_review_notices",
        "schedule": 60.0,
    },
    "reconcile-with-providers": {
        "task": "notary.tasks.reconcile_with_providers",
        "schedule": float(env_int("NOTARY_RECONCILE_INTERVAL_SECONDS", 3600)),
    },
    "prune-webhook-quarantine": {
        "task": "webhooks.tasks.prune_unverified_requests",
        "schedule": 3600.0,
    },
}
# Reconciliation's beat windows end this long ago: a provider's list may lag what it did, and
# an effect's verdict is recorded after the provider acted (notary.reconciliation).
NOTARY_RECONCILE_LAG_SECONDS = env_int("NOTARY_RECONCILE_LAG_SECONDS", 600)
# A webhook body larger than this is refused (413, JSON) unread, or as soon as reading it passes
# the limit (chunked, or a Content-Length that lies); the one limit on webhook bodies, whatever
# DATA_UPLOAD_MAX_MEMORY_SIZE says.
WEBHOOK_MAX_BODY_BYTES = env_int("WEBHOOK_MAX_BODY_BYTES", 256 * 1024)
# Requests to one endpoint per minute that are not verified events (bad signature, or signed
# but unreadable) before the rest of the minute's are refused (429) without being stored.
WEBHOOK_UNVERIFIED_PER_MINUTE = env_int("WEBHOOK_UNVERIFIED_PER_MINUTE", 60)
# The quarantine of such requests: the newest this many per endpoint, none older than this.
WEBHOOK_QUARANTINE_KEEP = env_int("WEBHOOK_QUARANTINE_KEEP", 100)
WEBHOOK_QUARANTINE_SECONDS = env_int("WEBHOOK_QUARANTINE_SECONDS", 7 * 24 * 3600)
# A stored event not ingested this long after it arrived had its task lost: the sweep queues it.
WEBHOOK_INGEST_GRACE_SECONDS = env_int("WEBHOOK_INGEST_GRACE_SECONDS", 60)
# Queued events ingested per transaction, and batches per ingest_pending task before it makes
# way for the worker's other tasks (and queues itself again).
WEBHOOK_INGEST_BATCH = env_int("WEBHOOK_INGEST_BATCH", 50)
WEBHOOK_INGEST_BATCHES_PER_TASK = env_int("WEBHOOK_INGEST_BATCHES_PER_TASK", 20)

# The notary's Ed25519 key for checkpoints, in the signed-note "PRIVATE+KEY+..." form.
NOTARY_SIGNING_KEY_FILE = Path(env_str("NOTARY_SIGNING_KEY_FILE", str(VAR_DIR / "signing.key")))
# The notary's memory of the last tree it signed for each log, outside the database (a DBA who
# deletes checkpoints cannot make it sign a rollback); empty: `<NOTARY_SIGNING_KEY_FILE>.signed`,
# beside the key. Keep it wherever the key is kept, and back it up with it.
NOTARY_SIGNED_HEADS_FILE = env_str("NOTARY_SIGNED_HEADS_FILE", "")
# Each tenant's log is named <NOTARY_ORIGIN>/<tenant slug>; it also names the log's signing key.
NOTARY_ORIGIN = env_str("NOTARY_ORIGIN", "notary.interlock.example")
# The witnesses (C2SP tlog-witness) every signed checkpoint is sent to, as "URL VKEY" pairs
# separated by commas, and one pair per line in LEDGER_WITNESSES_FILE if it is set (a file a
# deployment writes once the witnesses' keys exist); VKEY is the witness's cosignature/v1 key
# (`python -m witness vkey`). Run each witness with --log-family <NOTARY_ORIGIN>=<the notary's
# vkey from /v1/keys>.
LEDGER_WITNESSES = parse_witnesses(env_str("LEDGER_WITNESSES", "")) + parse_witnesses(
    ",".join(read_lines(env_str("LEDGER_WITNESSES_FILE", "")))
)
# How many of those witnesses must have cosigned a checkpoint, each cosignature verified under
# the witness's key, before the notary publishes it (receipts, exports, /v1/checkpoints/latest);
# 0 publishes each checkpoint once signed. Configuration, never a database row.
LEDGER_COSIGNATURE_QUORUM = env_int("LEDGER_COSIGNATURE_QUORUM", 0)
if not 0 <= LEDGER_COSIGNATURE_QUORUM <= len(LEDGER_WITNESSES):
    raise ImproperlyConfigured(
        f"LEDGER_COSIGNATURE_QUORUM is {LEDGER_COSIGNATURE_QUORUM}, but "
        f"{len(LEDGER_WITNESSES)} witnesses are configured (LEDGER_WITNESSES)"
    )
# A checkpoint the witnesses cosigned is sent to them again once its newest cosignature is this
# old (the beat's witness-checkpoints task), so the published checkpoint of a log that has not
# grown carries cosignatures within verifiers' freshness bound (a day, by default).
LEDGER_COSIGNATURE_REFRESH_SECONDS = env_int("LEDGER_COSIGNATURE_REFRESH_SECONDS", 3600)
# How long one add-checkpoint request to a witness may take before the try counts as failed
# (the beat's witness-checkpoints task tries again).
LEDGER_WITNESS_TIMEOUT_SECONDS = float(env_int("LEDGER_WITNESS_TIMEOUT_SECONDS", 10))

# Review notices (notary.notifications): the effect pages they link to are under this URL, and
# one try of a notice's email or webhook waits this long for an answer.
NOTARY_PUBLIC_URL = env_str("NOTARY_PUBLIC_URL", "http://localhost:8000").rstrip("/")
NOTARY_NOTIFY_TIMEOUT_SECONDS = float(env_int("NOTARY_NOTIFY_TIMEOUT_SECONDS", 10))
# Email through Django's mail framework: an SMTP server once EMAIL_HOST is set; before that the
# embedded mode prints each email on the console.
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if "EMAIL_HOST" in os.environ
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Interlock notary <notary@localhost>")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
    # A 404 or 409 is the protocol answering (no such effect yet, attempt taken), not a fault.
    "loggers": {"django.request": {"level": "ERROR"}},
}
if not REDIS_URL:
    # The embedded mode's in-memory broker has no host, which kombu warns of on every task.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}  # type: ignore[index]
