# Two commands a newcomer needs (see README):
#   make demo   install, then plan Mistral-7B on this machine (or a bundled reference machine when there is no GPU)
#   make test   install with the CPU build of torch, then run the whole test suite
# For contributors: make lint (ruff + the import-layer contract in pyproject.toml), make docs (regenerate
# accelerate_configs/ and recipes/ after changing the estimator, planner or emitter).
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build pip finds locally; a plain `torch` requirement would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	# deepspeed ships only as source: built against the torch above, without its CUDA ops (the tests parse its configs).
	DS_BUILD_OPS=0 $(PY) -m pip install -q --no-build-isolation "deepspeed==0.19.8"

demo: install
	$(PY) -m generator topo
	$(PY) -m generator plan --model mistral-7b --output out/mistral-7b.yaml --force

test: install
	# two workers (the CI machine's cores); tests that launch process groups share one of them (tests/conftest.py)
	$(PY) -m pytest -q -n 2 --dist loadgroup

lint: install
	$(PY) -m ruff check . && $(PY) -m ruff format --check .
	# lint-imports puts the working directory on sys.path, so run it from the repository root (docsgen, bench).
	$(VENV)/bin/lint-imports --no-cache

docs: install
	$(PY) -m docsgen

.PHONY: install demo test lint docs
