# make run   — create .venv, install, start the bot (the local shell when no Slack credentials are set)
# make test  — create .venv, install with dev extras, check uv.lock agrees with pyproject.toml, run the whole
#              suite, ruff and mypy
# make lock  — regenerate uv.lock (what Heroku installs) from pyproject.toml; commit it with pyproject.toml
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: help run test lint lock bench clean

help:  ## the first target: plain `make` lists what there is
	@echo "make run    create .venv, install, start the bot (the local shell when no Slack credentials are set)"
	@echo "make test   install with dev extras, run the whole suite, ruff and mypy"
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

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot tests benchmarks
	$(BIN)/mypy

lock: $(VENV)/.installed-dev
	$(BIN)/uv lock --python $(BIN)/python

bench: $(VENV)/.installed-dev
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
