"""What a schema fuzzer runs against besides generated ids: a tenant with a target, a lease, an
effect proposed and dispatched under it (attempt 1, no outcome yet), a key of each role and,
given a signer, a signed checkpoint, so operations also meet records that exist. The target's
reconciliation source names a provider nothing answers at, so a reconciliation meets its
provider_unavailable refusal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from gate_client.proposal import Proposal
from ledger import services as ledger_services
from ledger.core.note import Signer
from notary import services
from notary.models import Tenant
from notary.reconciliation import reconciliation_source_set
from testkit.factories import leased

ROLES = ("agent", "approver", "service", "auditor")  # the order roles are tried in
TARGET = "refunds"
NO_PROVIDER = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused


@dataclass(frozen=True)
class SchemaRecords:
    tenant: Tenant
    tokens: dict[str, str]
    effect_id: str
    lease_id: str

    @property
    def ids(self) -> dict[str, str]:
        """A value for every path parameter the schema names, pointing at these records."""
        return {
            "effect_id": self.effect_id,
            "lease_id": self.lease_id,
            "name": TARGET,
            "origin": self.tenant.log.origin,
        }


def schema_records(slug: str, *, signer: Signer | None = None) -> SchemaRecords:
    tenant = services.tenant_create(slug=slug, name=f"Schema fuzzing: {slug}")
    target = services.target_register(
        tenant=tenant, name=TARGET, tier=1, queryable=True, max_inflight=timedelta(seconds=5)
    )
    reconciliation_source_set(target=target, provider="reference", base_url=NO_PROVIDER)
    lease = leased(tenant, "case_1", "refund", requested_by="refund-bot")
    proposal = Proposal(
        case_id="case_1",
        target=TARGET,
        action="refund",
        payload={"amount_cents": 100},
        lease_id=lease.lease_id,
        tenant=tenant.slug,
    )
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    if signer is not None:
        ledger_services.sign_checkpoint(log=tenant.log, signer=signer)
    tokens = {
        role: services.api_key_issue(
            tenant=tenant,
            role=role,
            holder=f"{role}-holder",
            targets=[TARGET] if role == "service" else [],
        )[1]
        for role in ROLES
    }
    return SchemaRecords(tenant, tokens, proposal.effect_id, lease.lease_id)
