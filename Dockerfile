FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY notary ./notary
COPY ledger ./ledger
COPY manage.py ./
RUN pip install --no-cache-dir . && mkdir -p /var/lib/notary
EXPOSE 8000
CMD ["gunicorn", "notary.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
