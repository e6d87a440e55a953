"""What `create_reviewer` and `create_auditor` share: a person for the admin, in one of the review
groups (notary.groups), with a password never typed on the command line. (Django takes no
command from a module whose name starts with an underscore.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary.errors import NotaryInputError

PEOPLE_HELP = (
    "A password is never an argument, which shell history and process lists would keep: it is "
    "read from --password-file (its first line) or from the environment variable --password-env "
    "names. With neither, the user has no usable password until they set one with "
    "`manage.py changepassword USERNAME`, which asks for it without echoing it. Every staff user "
    "sees every tenant's records in the admin: there is no per-tenant scope."
)


class Create(Protocol):
    def __call__(self, *, username: str, email: str, password: str | None) -> User: ...


class PersonCommand(BaseCommand):
    """Create one staff user in `group` through `create`, its service in notary.services."""

    group: str
    create: Create

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--username", required=True, help="the login, and who the ledger says decided"
        )
        parser.add_argument("--email", required=True)
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--password-file",
            type=Path,
            metavar="FILE",
            help="its first line is the password (readable only by you; delete it after)",
        )
        source.add_argument(
            "--password-env", metavar="NAME", help="the environment variable holding it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = _password(file=options["password_file"], env=options["password_env"])
        try:
            user = self.create(
                username=options["username"], email=options["email"], password=password
            )
        except NotaryInputError as exc:
            raise CommandError(str(exc)) from exc
        then = (
            ""
            if password is not None
            else f"; no password yet: set it with `manage.py changepassword {user.username}`"
        )
        self.stdout.write(
            f"created {user.username} <{user.email}>, staff in {self.group!r}, "
            f"seeing every tenant{then}"
        )


def _password(*, file: Path | None, env: str | None) -> str | None:
    """The password from the file's first line or the environment, or None for neither."""
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--password-file: {exc}") from exc
        return text.splitlines()[0] if text else ""
    if env is not None:
        if env not in os.environ:
            raise CommandError(f"--password-env: no environment variable {env!r}")
        return os.environ[env]
    return None
