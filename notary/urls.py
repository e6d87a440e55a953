from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from notary.views import LeaseDetailView, LeaseGrantView, LeaseRevokeView, WhoAmIView


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("v1/whoami", WhoAmIView.as_view(), name="whoami"),
    path("v1/leases", LeaseGrantView.as_view(), name="lease-grant"),
    path("v1/leases/<str:lease_id>", LeaseDetailView.as_view(), name="lease-detail"),
    path("v1/leases/<str:lease_id>/revoke", LeaseRevokeView.as_view(), name="lease-revoke"),
]
