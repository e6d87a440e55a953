from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary.errors import NotaryInputError, NotaryNotFound
from notary.mandates import mandate_key_revoke, mandate_key_trust
from notary.models import Tenant


class Command(BaseCommand):
    help = (
        "Trust a public key's AP2 mandates for a tenant's lease grants (POST "
        "/v1/leases/from-mandate): role user for the key that signs mandates (a user's, or "
        "their agent provider's trusted surface's), merchant for the key that signs checkout "
        "JWTs. Prints the key's id, its RFC 7638 thumbprint. --revoke KEY_ID trusts it no more."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--jwk", type=Path, help="a file holding the public JWK (JSON)")
        parser.add_argument("--role", choices=["user", "merchant"])
        parser.add_argument("--holder", help="who holds the key, e.g. 'Finance Lead'")
        parser.add_argument("--revoke", metavar="KEY_ID", help="trust this key no more")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            if options["revoke"]:
                key = mandate_key_revoke(tenant=tenant, key_id=options["revoke"])
                self.stdout.write(f"{tenant.slug}: {key} trusted no more")
                return
            if not (options["jwk"] and options["role"] and options["holder"]):
                raise CommandError("give --jwk, --role and --holder (or --revoke KEY_ID)")
            try:
                jwk = json.loads(options["jwk"].read_text())
            except (OSError, ValueError) as exc:
                raise CommandError(f"{options['jwk']}: {exc}") from exc
            key = mandate_key_trust(
                tenant=tenant, jwk=jwk, role=options["role"], holder=options["holder"]
            )
        except (NotaryInputError, NotaryNotFound) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{tenant.slug}: trusts {key}")
        self.stdout.write(key.key_id)
