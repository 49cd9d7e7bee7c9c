# One install, two commands: `make demo` and `make test`.
# `make demo` installs the runtime dependencies only; `make test` adds the test extras
# (Playwright, hypothesis, ...), which take most of a fresh clone's install time.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test test-lowest lint bench mutation install clean

# uv installs the wheels in parallel (about 10 s for the runtime dependencies here, against about
# 5 minutes for pip one at a time); pip stays the fallback when uv cannot reach an index.
# --compile-bytecode: the libraries' bytecode written at install, as pip does (uv does not by
# default), so the first `faultlens dashboard` or `demo` does not compile Streamlit and plotly.
UV_INSTALL = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/pip install --quiet uv
	$(UV_INSTALL) -e . || $(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(UV_INSTALL) -e '.[test]' || $(BIN)/pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	@echo "faultlens demo: synthetic cluster, ingest, train, replay, report (about a minute on 2 idle cores)"
	@start=$$(date +%s); $(BIN)/faultlens demo && echo "faultlens demo: done in $$(( $$(date +%s) - start )) s"

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/pytest -q

# The fast part of the suite at the lowest versions pyproject.toml allows (uv's lowest-direct
# resolution: every direct dependency at its declared floor), in a venv of its own.
LOWEST := .venv-lowest
LOWEST_TESTS := tests/ingest/test_reader.py tests/ingest/test_scan.py tests/ingest/kernel/test_kernel.py \
	tests/ingest/nccl/test_nccl.py tests/ingest/slurm/test_slurm.py tests/ingest/telemetry/test_telemetry_prom.py \
	tests/ingest/test_lake.py tests/replay tests/models/test_predictor.py tests/app/test_cli.py \
	tests/app/test_exit_codes.py
test-lowest: $(TEST_STAMP)
	test -x $(LOWEST)/bin/python || $(BIN)/uv venv --quiet --python $(BIN)/python $(LOWEST)
	$(BIN)/uv pip install --quiet --python $(LOWEST)/bin/python --resolution lowest-direct -e '.[test]'
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider -m "not integration and not slow" $(LOWEST_TESTS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.run_all

# Mutation testing of a parser and the replay engine (cosmic-ray; ~25 min on two busy cores).
mutation: $(TEST_STAMP)
	bash bench/mutation/run.sh

clean:
	rm -rf $(VENV) $(LOWEST) data/faultlens.duckdb data/models data/reports
