# One install, two commands: `make demo` and `make test`.
# `make demo` installs the runtime dependencies only; `make test` adds the test extras
# (Playwright, hypothesis, ...), which take most of a fresh clone's install time.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint bench install clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	@echo "faultlens demo: synthetic cluster, ingest, train, replay, report (a few minutes the first time)"
	$(BIN)/faultlens demo

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q

lint: $(TEST_STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) data/faultlens.duckdb data/models data/reports
