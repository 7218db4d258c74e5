PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.installed-dev
	@$(BIN)/python -m bot run-default

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check bot tests benchmarks
	$(BIN)/mypy

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot tests benchmarks
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
