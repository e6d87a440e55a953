"""Where the repository is, and the database a child process should use."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_database_url() -> str:
    """The database this process is connected to, as a child process's DATABASE_URL."""
    from django.db import connection

    db = connection.settings_dict
    auth = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
