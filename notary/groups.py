"""The two groups of people the admin is for: finance reviewers, who decide AMBIGUOUS effects
and revoke leases, and auditors, who only read. Kept in step after every migrate."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission

FINANCE_REVIEWERS = "Finance reviewers"
AUDITORS = "Auditors"

_READ = {
    "notary": [
        "tenant",
        "target",
        "lease",
        "leaserequest",
        "effect",
        "ambiguouseffect",
        "reviewnotice",
        "reviewnotifications",
    ],
    "ledger": ["log", "entry", "checkpoint", "cosignature", "signingkey"],
    "webhooks": ["endpoint", "rawevent", "ingestion"],
}
_DECIDE = [("notary", "resolve_effect"), ("notary", "revoke_lease")]


def ensure_review_groups(**kwargs: Any) -> None:
    """Create or correct both groups (a post_migrate receiver, safe to run any time)."""
    read = [(app, f"view_{model}") for app, models in _READ.items() for model in models]
    for name, wanted in ((AUDITORS, read), (FINANCE_REVIEWERS, read + _DECIDE)):
        group, _ = Group.objects.get_or_create(name=name)
        permissions = [
            Permission.objects.filter(content_type__app_label=app, codename=codename).first()
            for app, codename in wanted
        ]
        group.permissions.set([p for p in permissions if p is not None])
