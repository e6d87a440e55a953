"""People for the admin are made by command: `create_reviewer` and `create_auditor` make a staff
user in the review group that says what they may do, with a password from a file or the
environment (never an argument) or none until they set one; a refused one creates nothing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from notary.groups import AUDITORS, FINANCE_REVIEWERS
from notary.models import Tenant

pytestmark = pytest.mark.django_db

PASSWORD = "ledger-lantern-47"


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text(f"{PASSWORD}\n")  # as `echo` writes it: the newline is not the password's
    return path


def create(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def logged_in(username: str, password: str) -> Client:
    client = Client()
    assert client.login(username=username, password=password)
    return client


def test_a_reviewer_logs_in_sees_the_queue_and_may_decide(password_file: Path) -> None:
    said = create(
        "create_reviewer",
        *("--username", "fiona", "--email", "fiona@example.com"),
        *("--password-file", str(password_file)),
    )
    assert said == (
        f"created fiona <fiona@example.com>, staff in {FINANCE_REVIEWERS!r}, seeing every tenant\n"
    )
    user = User.objects.get(username="fiona")
    assert (user.is_staff, user.is_superuser, user.email) == (True, False, "fiona@example.com")
    assert [g.name for g in user.groups.all()] == [FINANCE_REVIEWERS]
    reviewer = logged_in("fiona", PASSWORD)
    assert reviewer.get("/admin/").status_code == 200
    assert reviewer.get("/admin/notary/ambiguouseffect/").status_code == 200
    assert user.has_perm("notary.resolve_effect")
    assert user.has_perm("notary.revoke_lease")


def test_an_auditor_logs_in_and_reads_but_may_not_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUDREY_PASSWORD", PASSWORD)
    said = create(
        "create_auditor",
        *("--username", "audrey", "--email", "audrey@example.com"),
        *("--password-env", "AUDREY_PASSWORD"),
    )
    assert f"created audrey <audrey@example.com>, staff in {AUDITORS!r}" in said
    user = User.objects.get(username="audrey")
    assert (user.is_staff, user.is_superuser) == (True, False)
    assert [g.name for g in user.groups.all()] == [AUDITORS]
    auditor = logged_in("audrey", PASSWORD)
    assert auditor.get("/admin/notary/ambiguouseffect/").status_code == 200
    assert auditor.get("/admin/notary/effect/").status_code == 200
    assert not user.has_perm("notary.resolve_effect")
    assert not user.has_perm("notary.revoke_lease")


def test_without_a_password_the_user_sets_one_with_changepassword() -> None:
    said = create("create_reviewer", "--username", "fiona", "--email", "fiona@example.com")
    assert said.endswith("; no password yet: set it with `manage.py changepassword fiona`\n")
    user = User.objects.get(username="fiona")
    assert not user.has_usable_password()
    assert not Client().login(username="fiona", password="")


def refused(command: str, *args: str) -> str:
    with pytest.raises(CommandError) as raised:
        create(command, *args)
    return str(raised.value)


def test_an_existing_username_is_refused_and_nothing_changes(password_file: Path) -> None:
    create("create_reviewer", "--username", "fiona", "--email", "fiona@example.com")
    before = list(User.objects.values_list())
    again = ("--email", "other@example.com", "--password-file", str(password_file))
    assert "already exists" in refused("create_auditor", "--username", "fiona", *again)
    # Read as the same name in the ledger's `by`: a case or look-alike variant is refused too.
    for alike in ("Fiona", "f\u0131ona"):  # the second with a dotless i
        assert "reads as 'fiona'" in refused("create_reviewer", "--username", alike, *again)
    assert list(User.objects.values_list()) == before
    assert [g.name for g in User.objects.get(username="fiona").groups.all()] == [FINANCE_REVIEWERS]


@pytest.mark.parametrize(
    ("email", "says"),
    [("fiona", "email: Enter a valid email address."), ("", "email: an email address is required")],
)
def test_a_bad_email_is_refused_and_creates_nothing(email: str, says: str) -> None:
    assert says in refused("create_reviewer", "--username", "fiona", "--email", email)
    assert not User.objects.exists()


@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("short7!", "This password is too short"),
        ("password123", "This password is too common"),
        ("", "an empty password"),
    ],
)
def test_a_weak_password_is_refused_and_creates_nothing(
    tmp_path: Path, password: str, says: str
) -> None:
    path = tmp_path / "password"
    path.write_text(password)
    args = ("--username", "fiona", "--email", "fiona@example.com", "--password-file", str(path))
    assert says in refused("create_reviewer", *args)
    assert not User.objects.exists()


def test_a_password_source_that_is_not_there_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password_file: Path
) -> None:
    monkeypatch.delenv("NO_SUCH_PASSWORD", raising=False)
    who = ("--username", "fiona", "--email", "fiona@example.com")
    assert "no environment variable 'NO_SUCH_PASSWORD'" in refused(
        "create_reviewer", *who, "--password-env", "NO_SUCH_PASSWORD"
    )
    assert "--password-file" in refused(
        "create_reviewer", *who, "--password-file", str(tmp_path / "missing")
    )
    assert "not allowed with" in refused(
        "create_reviewer",
        *who,
        *("--password-file", str(password_file), "--password-env", "HOME"),
    )
    assert not User.objects.exists()


def test_there_is_no_tenant_scope_to_give(acme: Tenant) -> None:
    """The admin shows every staff user every tenant's records, so `--tenant` would promise a
    scope nothing enforces: it is refused rather than accepted and ignored."""
    args = ("--username", "fiona", "--email", "fiona@example.com", "--tenant", "acme")
    assert "unrecognized arguments: --tenant acme" in refused("create_reviewer", *args)
    assert not User.objects.exists()
