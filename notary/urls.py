from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from notary.views import (
    AttestationView,
    EffectDetailView,
    EffectDispatchView,
    EffectEvidenceView,
    EffectOutcomeView,
    EffectProposeView,
    EffectReceiptView,
    EffectUnsettledView,
    ExportReceiptsView,
    FindingListView,
    LeaseDetailView,
    LeaseFromMandateView,
    LeaseGrantView,
    LeaseRequestView,
    LeaseRevokeView,
    TargetDetailView,
    TargetListView,
    TargetReconcileView,
    WhoAmIView,
)


class RecordIdConverter:
    """An effect or lease id in a path: printable, no slash. A NUL or other control character
    cannot be an id (PostgreSQL text cannot even hold NUL), so such a path matches nothing."""

    regex = "[^/\x00-\x1f\x7f]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RecordIdConverter, "id")


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def not_found(request: HttpRequest, exception: Exception) -> JsonResponse:
    """Every 404, in the API's one error shape."""
    return JsonResponse(
        {"error": "not_found", "detail": f"nothing at {request.path!r}"}, status=404
    )


handler404 = not_found


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("webhooks/", include("webhooks.urls")),
    path("v1/whoami", WhoAmIView.as_view(), name="whoami"),
    path("v1/leases", LeaseGrantView.as_view(), name="lease-grant"),
    path("v1/leases/from-mandate", LeaseFromMandateView.as_view(), name="lease-from-mandate"),
    path("v1/lease-requests", LeaseRequestView.as_view(), name="lease-request"),
    path("v1/leases/<id:lease_id>", LeaseDetailView.as_view(), name="lease-detail"),
    path("v1/leases/<id:lease_id>/revoke", LeaseRevokeView.as_view(), name="lease-revoke"),
    path("v1/targets", TargetListView.as_view(), name="targets"),
    path("v1/targets/<id:name>", TargetDetailView.as_view(), name="target-detail"),
    path("v1/targets/<id:name>/reconcile", TargetReconcileView.as_view(), name="target-reconcile"),
    path("v1/reconciliation/findings", FindingListView.as_view(), name="findings"),
    path("v1/", include("ledger.api.urls")),
    path("v1/attestations", AttestationView.as_view(), name="attestations"),
    path("v1/exports/receipts", ExportReceiptsView.as_view(), name="export-receipts"),
    path("v1/effects", EffectProposeView.as_view(), name="effect-propose"),
    path("v1/effects/unsettled", EffectUnsettledView.as_view(), name="effect-unsettled"),
    path("v1/effects/<id:effect_id>", EffectDetailView.as_view(), name="effect-detail"),
    path(
        "v1/effects/<id:effect_id>/dispatch", EffectDispatchView.as_view(), name="effect-dispatch"
    ),
    path("v1/effects/<id:effect_id>/outcome", EffectOutcomeView.as_view(), name="effect-outcome"),
    path("v1/effects/<id:effect_id>/receipt", EffectReceiptView.as_view(), name="effect-receipt"),
    path(
        "v1/effects/<id:effect_id>/evidence", EffectEvidenceView.as_view(), name="effect-evidence"
    ),
    path(
        "v1/schema/",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]),
        name="schema",
    ),
    path(
        "v1/docs/",
        SpectacularSwaggerView.as_view(
            url_name="schema", authentication_classes=[], permission_classes=[]
        ),
        name="docs",
    ),
]
