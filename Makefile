# make run   — create .venv, install, start the bot (the local shell when no Slack credentials are set)
# make test  — create .venv, install with dev extras, check uv.lock agrees with pyproject.toml, run the whole
#              suite, ruff and mypy
# make lock  — regenerate uv.lock (what Heroku installs) from pyproject.toml; commit it with pyproject.toml
# make test-lowest — a second venv (.venv-lowest) with every direct dependency at its floor in pyproject.toml
#              (uv's --resolution lowest-direct); the tests that drive slack_sdk and Bolt, ruff and mypy
#              run against it
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: help run test test-lowest lint lock bench clean

help:  ## the first target: plain `make` lists what there is
	@echo "make run    create .venv, install, start the bot (the local shell when no Slack credentials are set)"
	@echo "make test   install with dev extras, run the whole suite, ruff and mypy"
	@echo "make test-lowest  the Slack tests, ruff and mypy with every direct dependency at its floor"
	@echo "make lint   ruff and mypy only"
	@echo "make lock   regenerate uv.lock from pyproject.toml"
	@echo "make bench  run every benchmark in benchmarks/"
	@echo "make clean  remove .venv and build leftovers"

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

# Byte-compiled first, as a regular install would be: an editable install leaves the package as source,
# and where PYTHONDONTWRITEBYTECODE is set every start would compile it again (~a third of the start-up).
run: $(VENV)/.installed
	$(BIN)/python -m compileall -q bot
	$(BIN)/mlresearch-bot serve --or-shell

test: $(VENV)/.installed-dev
	$(BIN)/uv lock --check --quiet --python $(BIN)/python
	$(BIN)/python -m pytest
	$(BIN)/ruff check bot tests benchmarks
	$(BIN)/mypy

# The floors are proved, not assumed: everything at the lowest version pyproject.toml allows (the direct
# dependencies; what they pull in at its newest), installed by the uv of the dev venv from the package index.
# The Slack tests run on SQLite (the backend changes nothing Slack sees); psycopg's floor gets the store suite's
# PostgreSQL half when TEST_DATABASE_URL is set.
LOWEST := .venv-lowest
SLACK_TESTS := tests/test_app.py tests/test_agent.py tests/test_socket_mode.py tests/test_unfurls.py \
	tests/test_conversation.py tests/test_oauth.py tests/test_oauth_state.py tests/test_posting.py \
	tests/test_deliver.py tests/test_digest.py tests/test_http_edge.py tests/test_reconcile.py \
	tests/test_blocks.py tests/test_feed_edges.py tests/test_listeners.py tests/test_sessions.py \
	tests/test_entities.py tests/test_flexpane.py tests/test_manifest.py tests/test_shapes.py \
	$(wildcard tests/test_slack_*.py)

$(LOWEST)/.installed: pyproject.toml | $(VENV)/.installed-dev
	rm -rf $(LOWEST)
	$(BIN)/uv venv --quiet --python $(BIN)/python $(LOWEST)
	$(BIN)/uv pip install --quiet --python $(LOWEST)/bin/python --resolution lowest-direct -e '.[dev]'
	touch $@

test-lowest: $(LOWEST)/.installed
	$(BIN)/uv pip list --python $(LOWEST)/bin/python 2>/dev/null | grep -iE '^(slack-bolt|slack-sdk|httpx|tantivy|pytest) '
	$(LOWEST)/bin/ruff check bot tests benchmarks
	$(LOWEST)/bin/mypy
	TEST_DATABASE_URL= $(LOWEST)/bin/python -m pytest $(SLACK_TESTS)
	$(if $(TEST_DATABASE_URL),$(LOWEST)/bin/python -m pytest tests/test_store.py -k postgres)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot tests benchmarks
	$(BIN)/mypy

lock: $(VENV)/.installed-dev
	$(BIN)/uv lock --python $(BIN)/python

bench: $(VENV)/.installed-dev
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(LOWEST) build *.egg-info
