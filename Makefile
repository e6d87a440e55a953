# The two commands a newcomer runs: `make demo` (embedded: SQLite, Celery eager, no servers)
# and `make test` (lint, types, and the suite on PostgreSQL and Redis).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench experiments clean

$(BIN)/.installed: pyproject.toml
	@echo "Creating $(VENV) and installing the project with its dev extras (a minute or two, once)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python manage.py migrate --verbosity 0
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python manage.py demo

test: lint typecheck pytest

# ruff (style, complexity, no imports of tests), the import layering (pyproject's
# [tool.importlinter]), migrations that match the models, and the pre-commit configuration
# that runs these same checks before each commit.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pre-commit validate-config .pre-commit-config.yaml

typecheck: $(BIN)/.installed
	$(BIN)/mypy .

pytest: $(BIN)/.installed
	$(BIN)/pytest -n 2

# Every benchmark, one after another; `make bench BENCH_FLAGS=--quick` is a smoke run of them all.
BENCHES := ledger group_commit exports notary webhooks gate_recovery
BENCH_FLAGS ?=

# Each bench prints its goals; they are collected in $(GOALS) and printed together at the end.
GOALS := var/bench-goals.jsonl

bench: $(BIN)/.installed
	mkdir -p var && rm -f $(GOALS)
	set -e; for bench in $(BENCHES); do \
		BENCH_GOALS_FILE=$(GOALS) $(BIN)/python -m experiments.benches.$$bench $(BENCH_FLAGS); \
	done
	$(BIN)/python -m experiments.kit.goals $(GOALS)

# Regenerates experiments/results/*.md and *.json (a few minutes; PostgreSQL on 127.0.0.1).
experiments: $(BIN)/.installed
	$(BIN)/python experiments/run_experiments.py
	$(BIN)/python -m experiments.approvals

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
