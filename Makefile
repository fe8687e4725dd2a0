# Two entry points for a newcomer: `make demo` and `make test`. Both build .venv first.
# Without an NVIDIA GPU the CPU build of torch is installed before anything else, so no
# dependency pulls the multi-GB CUDA wheel; set TORCH_INDEX_URL to name a CPU wheel index
# (e.g. https://download.pytorch.org/whl/cpu) on machines that lack a local one.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
TORCH_INDEX_URL ?=
STAMP := $(VENV)/.installed
# the GPU machine's image, rehearsed on this CPU (docs/gpus.md): its Python (3.12) where one is
# found, its packages (benchmarks/gpu_image.txt), and what benchmarks/gpu_wheels.sh carries
GPU_VENV ?= .venv-gpu
GPU_CARRY ?= gpu_carry
GPU_PYTHON ?= $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12),\
	$(shell $(p) -c 'import sys; print(sys.version_info[:2] == (3, 12))' 2>/dev/null | grep -q True && echo $(p))) python3)
GPU_STAMP := $(GPU_VENV)/.installed

.PHONY: venv demo test test-slow gpu-carry lint format clean

venv: $(STAMP)

# pip would byte-compile all 19,000 files it installs; a run imports about 5,000 of them, which
# Python compiles on their first import and keeps, so each later process finds them compiled
unexport PYTHONDONTWRITEBYTECODE

# torch comes from pip (which reads the machine's pip.conf, where a CPU wheel may lie); the rest
# from uv, which fetches and unpacks in parallel (8 s where pip takes 25), torch held as installed,
# and pip where uv cannot reach an index that pip's configuration names. The venv starts without
# pip (ensurepip takes 4 s): the system's pip puts uv in, and uv pip; ensurepip where that fails
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv --without-pip $(VENV)
	python3 -m pip --python $(PY) install -q uv 2>/dev/null \
		|| { $(PY) -m ensurepip >/dev/null && $(PY) -m pip install -q uv; }
	$(VENV)/bin/uv pip install -q --python $(PY) pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		$(PY) -m pip install -q --no-compile torch; \
	else \
		$(PY) -m pip install -q --no-compile "torch==$(TORCH_VERSION)" \
			$(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL)); \
	fi
	$(PY) -c 'from importlib.metadata import version; print("torch==" + version("torch"))' > $(VENV)/torch.txt
	$(VENV)/bin/uv pip install -q --python $(PY) -c $(VENV)/torch.txt -e '.[dev,lm-eval]' \
		|| $(PY) -m pip install -q --no-compile -c $(VENV)/torch.txt -e '.[dev,lm-eval]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bytecanary demo

# everything but the 355M preset's runs on CPU, on up to 4 cores (pytest-xdist); no test has a
# wall-clock limit, so a loaded machine makes it slower, not red
test: $(STAMP) lint
	$(PY) -m pytest -n auto --maxprocesses 4 --dist worksteal -m "not compile and not big and not rehearsal"

# the 355M preset on CPU (markers big and compile): one optimizer step eager and with
# torch.compile (about 100 s of inductor compilation), its export and its probe; minutes on
# a quiet machine, far longer where the CPU has no bf16 units or others share it. Then the
# GPU check rehearsed in the GPU image's packages (marker rehearsal). CI runs it too
test-slow: $(STAMP) $(GPU_STAMP) gpu-carry
	$(PY) -m pytest -m "compile or big or rehearsal"

$(GPU_STAMP): benchmarks/gpu_image.txt
	rm -rf $(GPU_VENV)
	$(GPU_PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(GPU_VENV)/bin/python -m pip install -q -r benchmarks/gpu_image.txt
	touch $(GPU_STAMP)

gpu-carry: $(STAMP)
	benchmarks/gpu_wheels.sh $(GPU_CARRY)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) $(GPU_VENV) $(GPU_CARRY) .pytest_cache .ruff_cache
