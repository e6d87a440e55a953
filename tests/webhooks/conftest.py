from __future__ import annotations

from tests.notary.conftest import acme, globex

__all__ = ["acme", "globex"]
