# The notary's image: the API (gunicorn), the Celery worker and beat, the management commands,
# and the witness (`python -m witness`), from one set of files. tests/test_image.py builds a
# virtualenv from exactly the files copied here and runs the image's commands against it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    NOTARY_VAR_DIR=/var/lib/notary NOTARY_STATIC_ROOT=/app/static
WORKDIR /app
COPY pyproject.toml README.md manage.py ./
COPY notary ./notary
COPY ledger ./ledger
COPY webhooks ./webhooks
COPY gate_client ./gate_client
COPY witness ./witness
# The static files are collected at build time (content-hashed, compressed) and served by the
# app itself (WhiteNoise). The volumes' mount points exist owned by the unprivileged user, so a
# new named volume takes that owner.
RUN pip install --no-cache-dir . \
    && python manage.py collectstatic --noinput --verbosity 0 \
    && useradd --system --uid 10001 --home-dir /var/lib/notary notary \
    && mkdir -p /var/lib/notary /keys /public /witness /witness1 /witness2 \
    && chown notary /var/lib/notary /keys /public /witness /witness1 /witness2
USER notary
EXPOSE 8000
CMD ["gunicorn", "notary.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
