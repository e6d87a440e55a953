"""The ledger's read endpoints, included under /v1/ by notary.urls."""

from __future__ import annotations

from django.urls import path

from ledger.api.views import (
    ConsistencyProofView,
    InclusionProofView,
    LatestCheckpointView,
    LogVkeysView,
    SigningKeysView,
)

urlpatterns = [
    path("keys", SigningKeysView.as_view(), name="signing-keys"),
    path("logs/<path:origin>/vkey", LogVkeysView.as_view(), name="log-vkeys"),
    path("checkpoints/latest", LatestCheckpointView.as_view(), name="checkpoint-latest"),
    path("proofs/inclusion", InclusionProofView.as_view(), name="proof-inclusion"),
    path("proofs/consistency", ConsistencyProofView.as_view(), name="proof-consistency"),
]
