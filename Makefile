# kvtrace: `make demo` (ingest the sample week, print the token mix, write the JSON report),
# `make test` (lint and the fast suite, a few minutes) and `make test-all` (lint and every test,
# the slow end-to-end ones too: what CI runs). All create or reuse .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KV := $(VENV)/bin/kvtrace
DEMO_DB := .cache/demo.duckdb

.PHONY: demo lint test test-all bench install tools clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Node tools used by tests and benchmarks (the Claude Code CLI for real-client fixtures, ccusage).
tools: node_modules/.installed
node_modules/.installed: package.json
	npm install --no-audit --no-fund --ignore-scripts=false
	touch $@

demo: install
	mkdir -p .cache
	rm -f $(DEMO_DB)
	$(KV) ingest --db $(DEMO_DB) sample_traces/
	$(KV) report --db $(DEMO_DB) --ttl 5m,1h
	$(KV) report --db $(DEMO_DB) --ttl 5m,1h --format json --out kvtrace-report.json
	@echo "wrote kvtrace-report.json"

lint: install
	$(PY) -m ruff check kvtrace tests bench
	$(PY) -m ruff format --check kvtrace tests bench

test: lint
	$(PY) -m pytest -n 2 -m "not slow" tests

test-all: lint
	$(PY) -m pytest -n 2 tests

bench: install
	$(PY) -m bench

clean:
	rm -rf .cache .pytest_cache .hypothesis kvtrace-report.json
