"""The notary's domain errors, apart from the code raising them: services, selectors, the admin
and the API's exception handler all speak them, and none needs another's imports for it."""

from __future__ import annotations

from typing import Any


class NotaryInputError(ValueError):
    """The request is refused as given; nothing was written."""


class NotaryNotFound(LookupError):
    """No such record for this tenant (another tenant's records do not exist for it)."""


class NotaryForbidden(Exception):
    """Well-formed, but this key may not do it (a target outside a service key's scope, a
    grant beyond the tenant's policy); nothing was written."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class NotaryConflict(Exception):
    """Well-formed, but the ledger's state refuses it now; nothing was written, unless `extra`
    says what was kept (`kept_as`: a refused attestation of a performed effect, recorded as a
    contradiction)."""

    def __init__(self, code: str, detail: str, **extra: Any) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.extra = extra


class NotaryDependencyFailed(Exception):
    """Well-formed and allowed, but what the notary needs from outside itself for it failed (a
    provider's list that could not be read); nothing was written, and the same request may
    succeed later. Not the caller's input, and not the notary's fault either."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
