from __future__ import annotations

from django.urls import path

from webhooks.views import receive

urlpatterns = [
    path("<str:endpoint_id>/", receive, name="webhook-receive"),
    # Without the slash too: a POST is not redirected (and DEBUG's refusal to is a 500).
    path("<str:endpoint_id>", receive),
]
