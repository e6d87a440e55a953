from __future__ import annotations

from notary import services
from notary.groups import FINANCE_REVIEWERS
from notary.management.commands._people import PEOPLE_HELP, PersonCommand


class Command(PersonCommand):
    help = (
        f"Create a finance reviewer: a staff user in {FINANCE_REVIEWERS!r}, who may decide "
        f"AMBIGUOUS effects and revoke leases in /admin/. {PEOPLE_HELP}"
    )
    group = FINANCE_REVIEWERS
    create = staticmethod(services.reviewer_create)
