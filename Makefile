# The two commands a newcomer runs: `make demo` (embedded: SQLite, Celery eager, no servers)
# and `make test` (lint, types, and the suite on PostgreSQL and Redis).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench experiments clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python manage.py migrate --verbosity 0
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python manage.py demo

test: lint typecheck pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy ledger notary gate_client webhooks

pytest: $(BIN)/.installed
	$(BIN)/pytest -n 2

bench: $(BIN)/.installed
	$(BIN)/python experiments/bench_ledger.py
	$(BIN)/python experiments/bench_notary.py
	$(BIN)/python experiments/bench_webhooks.py
	$(BIN)/python experiments/bench_exports.py

# Regenerates experiments/results/*.md and *.json (a few minutes; PostgreSQL on 127.0.0.1).
experiments: $(BIN)/.installed
	$(BIN)/python experiments/run_experiments.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
