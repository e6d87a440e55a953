from __future__ import annotations

from django.urls import path

from webhooks.views import receive

urlpatterns = [path("<str:endpoint_id>/", receive, name="webhook-receive")]
