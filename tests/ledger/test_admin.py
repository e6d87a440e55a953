from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from ledger import services
from ledger.core.note import Signer
from ledger.models import Checkpoint, Entry, Log


@pytest.fixture
def staff_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("alice", "alice@example.com", "pw-alice-1"))
    return client


def test_entries_are_shown_but_cannot_be_added_changed_or_deleted(
    staff_client: Client, log: Log, signer: Signer
) -> None:
    entry = services.append_entry(log=log, kind="PROPOSED", body={"amount_cents": 2000})
    services.sign_checkpoint(log=log, signer=signer)

    listing = staff_client.get(reverse("admin:ledger_entry_changelist"))
    assert listing.status_code == 200
    assert b"PROPOSED" in listing.content
    assert b"Add entry" not in listing.content

    detail = staff_client.get(reverse("admin:ledger_entry_change", args=[entry.pk]))
    assert detail.status_code == 200
    assert b"{&quot;amount_cents&quot;:2000}" in detail.content
    assert bytes(entry.entry_hash).hex().encode() in detail.content
    assert b'name="_save"' not in detail.content

    assert staff_client.get(reverse("admin:ledger_entry_add")).status_code == 403
    delete_url = reverse("admin:ledger_entry_delete", args=[entry.pk])
    assert staff_client.post(delete_url, {"post": "yes"}).status_code == 403
    checkpoint = Checkpoint.objects.get(log=log)
    change_url = reverse("admin:ledger_checkpoint_change", args=[checkpoint.pk])
    assert staff_client.post(change_url, {"size": 0}).status_code == 403
    assert Entry.objects.filter(pk=entry.pk).exists()
    assert Checkpoint.objects.get(pk=checkpoint.pk).size == 1
