from __future__ import annotations

from notary import services
from notary.groups import AUDITORS
from notary.management.commands._people import PEOPLE_HELP, PersonCommand


class Command(PersonCommand):
    help = (
        f"Create an auditor: a staff user in {AUDITORS!r}, who reads everything in /admin/ and "
        f"decides nothing. {PEOPLE_HELP}"
    )
    group = AUDITORS
    create = staticmethod(services.auditor_create)
