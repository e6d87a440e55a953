"""The benchmarks' own PostgreSQL databases and Django on them: a database is dropped and
created again for each run, so figures never depend on what an earlier run left, and a name
without "bench" is refused, so a typo in a URL cannot drop a real database."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from experiments.kit.bench import progress


def database_name(database_url: str) -> str:
    return str(conninfo_to_dict(database_url).get("dbname", ""))


def _maintenance(database_url: str, statement: str) -> None:
    name = database_name(database_url)
    with psycopg.connect(make_conninfo(database_url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(name)))


def signed_heads_file(database_url: str) -> Path:
    """The notary's memory of what it signed on this bench database: new with the database."""
    return Path(tempfile.gettempdir()) / f"{database_name(database_url)}.signed-heads.json"


def recreate_database(database_url: str) -> None:
    """Drop and create the bench database, and forget what was signed on it; refuse a name
    without "bench"."""
    name = database_name(database_url)
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    _maintenance(database_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")
    _maintenance(database_url, "CREATE DATABASE {}")
    signed_heads_file(database_url).unlink(missing_ok=True)


def drop_database(database_url: str) -> None:
    _maintenance(database_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")


def setup_django(database_url: str) -> None:
    """Load the real settings against the bench database (the parent and every child)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "notary.settings"
    os.environ["NOTARY_SIGNED_HEADS_FILE"] = str(signed_heads_file(database_url))
    # DEBUG keeps every query in memory, which production does not pay; off, it needs a key.
    os.environ["DEBUG"] = "false"
    os.environ["SECRET_KEY"] = "bench-only-secret-key-not-for-production"
    import django

    django.setup()


@contextmanager
def bench_database(database_url: str, *, keep: bool) -> Iterator[None]:
    """The bench database recreated, Django set up on it and migrated; dropped at the end
    unless `keep`."""
    progress(f"recreating {database_name(database_url)} and migrating")
    recreate_database(database_url)
    setup_django(database_url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        if keep:
            progress("keeping the database")
        else:
            progress("dropping the database")
            drop_database(database_url)


def create_baseline_table(database_url: str) -> None:
    """bench_baseline: a bare table the INSERT + COMMIT baselines write one bytea row a commit
    to, the least a durable append can cost on this server."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_baseline (id bigserial PRIMARY KEY, body bytea NOT NULL)")


def add_database_argument(parser: argparse.ArgumentParser, default_name: str) -> None:
    """--database-url, by default BENCH_DATABASE_URL or `default_name` on the local server, and
    --keep (the database is dropped at the end otherwise)."""
    default = f"postgres://postgres@127.0.0.1:5432/{default_name}"
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", default),
        help="the bench database, dropped and recreated (default: BENCH_DATABASE_URL or "
        f"{default})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")


def sql_timer(record: Callable[[str, float], None]) -> Callable[..., Any]:
    """A wrapper for connection.execute_wrapper: hands each statement and its execution time
    (a commit not included) to `record`."""

    def timed(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(statement, params, many, context)
        finally:
            record(statement, time.perf_counter() - began)

    return timed
