"""A live notary for the experiments: gunicorn serving a fresh PostgreSQL database, with the
harness setting up tenants, targets, leases and webhook endpoints through the services, in
this process, against the same database. Agents reach it over HTTP like any agent.

    with live_notary(work_dir) as notary:
        shop = notary.tenant("shop", targets=[TargetSpec("email", tier=3, ...)])
        lease_id = shop.grant_lease("case-1", "refund_email")

The database is ``EXPERIMENTS_DATABASE_URL`` (default: interlock_bench_experiments on the local
server), dropped and created again each run; its name must contain "bench" so a typo cannot
drop a real one."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from experiments.kit.database import recreate_database, setup_django
from gate_client.money import MoneyDeclaration
from testkit.notary_server import running_notary

if TYPE_CHECKING:
    from notary.models import ApiKey, Tenant

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/interlock_bench_experiments"


@dataclass(frozen=True)
class TargetSpec:
    name: str
    tier: int
    max_inflight: timedelta
    evidence_window: timedelta | None = None
    key_window: timedelta | None = None
    attests_before_acting: bool = False
    money: MoneyDeclaration | None = None  # where its payloads hold their money, if they do


@dataclass
class NotaryTenant:
    url: str
    slug: str
    agent_token: str
    tenant: Tenant
    approver: ApiKey
    targets: dict[str, Any] = field(default_factory=dict)

    def grant_lease(
        self, case_id: str, action: str, *, limits: Mapping[str, int] | None = None
    ) -> str:
        from django.utils import timezone

        from notary import services

        lease = services.lease_grant(
            tenant=self.tenant,
            approver=self.approver,
            case_id=case_id,
            action=action,
            expires_at=timezone.now() + timedelta(hours=1),
            requested_by="agent",
            limits=limits,
        )
        return lease.lease_id

    def revoke_lease(self, lease_id: str, *, reason: str) -> None:
        from notary import services

        services.lease_revoke(tenant=self.tenant, lease_id=lease_id, by="finance", reason=reason)

    def service_token(self, holder: str) -> str:
        """A new service key: what a cooperating service attests with, for every target of
        the tenant."""
        from notary import services

        _, token = services.api_key_issue(
            tenant=self.tenant, role="service", holder=holder, targets=list(self.targets)
        )
        return token

    def webhook_endpoint(self, target: str, provider: str, secret: str) -> str:
        """A signed endpoint for `target`'s provider; its URL."""
        from webhooks import services as webhook_services

        endpoint = webhook_services.endpoint_create(
            tenant=self.tenant, target=self.targets[target], provider=provider, secrets=[secret]
        )
        return f"{self.url}/webhooks/{endpoint.public_id}/"

    def receipt(self, effect_id: str) -> dict[str, Any] | None:
        """The notary's receipt of the effect, or None if it never heard of it."""
        reply = httpx.get(
            f"{self.url}/v1/effects/{effect_id}/receipt",
            headers={"Authorization": f"Bearer {self.agent_token}"},
            timeout=10,
        )
        if reply.status_code == 404:
            return None
        reply.raise_for_status()
        receipt: dict[str, Any] = reply.json()["receipt"]
        return receipt


@dataclass
class LiveNotary:
    url: str

    def tenant(self, slug: str, *, targets: list[TargetSpec]) -> NotaryTenant:
        from notary import services

        tenant = services.tenant_create(slug=slug, name=slug)
        registered = {
            spec.name: services.target_register(
                tenant=tenant,
                name=spec.name,
                tier=spec.tier,
                queryable=spec.tier == 2,
                max_inflight=spec.max_inflight,
                key_window=spec.key_window,
                evidence_window=spec.evidence_window,
                attests_before_acting=spec.attests_before_acting,
                money=spec.money.body() if spec.money is not None else None,
            )
            for spec in targets
        }
        _, agent_token = services.api_key_issue(tenant=tenant, role="agent", holder="agent")
        approver, _ = services.api_key_issue(tenant=tenant, role="approver", holder="support")
        return NotaryTenant(self.url, slug, agent_token, tenant, approver, registered)


@contextmanager
def live_notary(work_dir: Path, *, database_url: str | None = None) -> Iterator[LiveNotary]:
    """Serve the notary. Without `database_url` it is a run of its own: a fresh database,
    migrated, with Django set up in this process. A test passes its own test database."""
    if database_url is None:
        database_url = os.environ.get("EXPERIMENTS_DATABASE_URL", DEFAULT_DATABASE_URL)
        recreate_database(database_url)
        setup_django(database_url)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    from django.db import connections

    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        with running_notary(database_url, work_dir) as url:
            yield LiveNotary(url)
    finally:
        connections.close_all()
