# Two commands do all the set-up (see README.md):
#   make gate   - the main job: release gate of the seed models on an embedded local Triton (CPU)
#   make test   - the plugin's own test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: gate test lint install clean bench bench-loadgen bench-serving

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

gate: $(STAMP)
	$(BIN)/pytest examples -v

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check pytest_triton tests examples locustfiles benchmarks conftest.py
	$(BIN)/mypy

# pytest-benchmark round trips per format x protocol x batch size; compare with
# `$(BIN)/pytest benchmarks --benchmark-compare`
bench: $(STAMP)
	$(BIN)/pytest benchmarks --benchmark-autosave

# Locust against wrk on a trivial model (installs Debian's wrk when missing)
bench-loadgen: $(STAMP)
	command -v wrk >/dev/null || apt-get install -y wrk
	$(BIN)/python benchmarks/loadgen_vs_wrk.py --duration 10 --repeat 3

# The same artifact in-process vs served (1 and 8 clients, per shared-memory transport)
bench-serving: $(STAMP)
	$(BIN)/python benchmarks/serving_overhead.py --repeat 3 --duration 5

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
