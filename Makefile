# Switchyard: `make run` starts the whole pipeline on embedded defaults; `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench lint proto install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip

# Re-install when the dependency list changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/switchyard up

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m "not slow"

bench: $(STAMP)
	$(BIN)/python -m loadtests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Regenerate the protobuf Python code and the AsyncAPI document (both committed;
# tests/unit/test_proto_fresh.py fails when either is stale).
proto: $(STAMP)
	$(BIN)/python -m shared.protogen
	$(BIN)/python -m shared.asyncapi

clean:
	rm -rf var/run var/bench
