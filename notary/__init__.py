"""The notary Django project: settings, URLs and the Celery app."""

from notary.celery import app as celery_app

__all__ = ["celery_app"]
