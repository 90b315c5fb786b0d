# Two commands do all the set-up (see README.md):
#   make gate   - the main job: release gate of the example models on an embedded local Triton (CPU)
#   make test   - the plugin's own test suite
# CI runs `make lint`, `.ci/run` (the system set-up, then exactly `make test`) and `make gate`
# (.github/workflows/ci.yml; .ci/run starts the Docker engine, builds the offline CPU image and
# installs test-deps first). test-cpu and test-container are parts of `make test` for local use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make gate BASELINE=main-report.json          compare with a stored gate report
# make gate SAVE_BASELINE=baseline.json        store this run's report when the gate passes
GATE_REPORT ?= gate-report
BASELINE ?=
SAVE_BASELINE ?=
GATE_ARGS ?=
# perf_analyzer's installer needs only the standard library and pip: the project's environment
# where it exists, else $(PYTHON)
TOOL_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

.PHONY: gate test test-fast test-deps wheel-check test-cpu test-container lint install clean bench bench-loadgen \
	bench-serving bench-perf-analyzer chromium screenshots perf-analyzer gpu-proof

# An editable install leaves out setup.py's pytest_triton_locust.pth (it puts our options into
# `locust --help`), so it is copied into the environment's site-packages here. It builds the
# load multiplexer's C pump in place (optional: without gcc and the Python headers the
# multiplexer reads HTTP answers in Python), again when its source changes.
$(STAMP): pyproject.toml constraints.txt setup.py pytest_triton_locust.pth \
		pytest_triton/client/wire/_http_pump.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[all]'
	$(BIN)/python -c "import shutil, sysconfig; \
		shutil.copy('pytest_triton_locust.pth', sysconfig.get_paths()['purelib'])"
	touch $(STAMP)

install: $(STAMP)

# Parity of every zoo model x format x protocol, a short DLRM load gate, and the report
# ($(GATE_REPORT)/report.md, report.json, junit.xml, plots); the exit code is the verdict.
gate: $(STAMP)
	rm -rf $(GATE_REPORT)
	$(BIN)/pytest examples -v --triton-report $(GATE_REPORT) \
		$(if $(BASELINE),--triton-baseline $(BASELINE)) \
		$(if $(SAVE_BASELINE),--triton-save-baseline $(SAVE_BASELINE)) $(GATE_ARGS)

# The suite, after the Debian packages it drives (test-deps: chromium for the web UI test,
# nginx for the replica tests) and perf_analyzer (the CSV compatibility test). Three xdist
# workers on the two cores: 14.7-15.9 min on 2026-11-29 with 1,319 tests, over the 12-minute
# budget (docs/development.md says where it goes); two leave the cores 16% idle, three 4-5%;
# TEST_WORKERS=2 for two. Each test
# file stays on one worker (its module's servers start once; the files that share the zoo
# server run together), in the order of tests/helpers/schedule.py (measured costs: long
# files first, a computing file beside a waiting one).
# The suite's own processes (workers, sub-sessions, Locust runs) compute with torch beside
# the servers on oversubscribed cores: their idle OpenMP threads sleep (OMP_WAIT_POLICY, as
# the local launcher's stubs do: a spinning thread cost 11x the CPU, benchmarks/stub_wait.py),
# and they write bytecode where the environment says not to (PYTHONDONTWRITEBYTECODE, set by
# some CI images): each cold sub-session otherwise compiles the package again (1.4 s of CPU).
TEST_WORKERS ?= 3
test: $(STAMP) test-deps perf-analyzer wheel-check
	OMP_WAIT_POLICY=PASSIVE PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The package as a user installs it (tests/helpers/check_installed.py): the sdist and the wheel
# built (python -m build) and checked (twine check), a file missing from the wheel named, the
# wheel installed (not editable) into a clean virtualenv with constraints.txt, and from a
# directory outside the checkout a user project's parity tests, locust -f with the web UI's
# static files served, triton-deploy --help and a few seconds of triton-perf. Stamped like
# $(STAMP): it runs again only when a file of the package, the packaging or the check changes.
WHEEL_STAMP := $(VENV)/.wheel-checked
PACKAGE_FILES := $(wildcard $(shell git ls-files pytest_triton 2>/dev/null))
$(WHEEL_STAMP): $(STAMP) $(PACKAGE_FILES) pyproject.toml setup.py MANIFEST.in constraints.txt \
		pytest_triton_locust.pth tests/helpers/check_installed.py
	$(BIN)/python tests/helpers/check_installed.py
	touch $(WHEEL_STAMP)

wheel-check: $(WHEEL_STAMP)

# The edit loop's tier, under 3 minutes: the unit tests and one real server (the local
# launcher's own tests), on two workers.
FAST_TESTS := tests/test_architecture.py tests/repository tests/parity/test_parity_messages.py \
	tests/load/test_windows.py tests/load/test_load_units.py tests/load/test_web_units.py \
	tests/load/test_stream_log.py tests/gate tests/server/test_local_launcher.py
test-fast: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadgroup --no-loadscope-reorder $(FAST_TESTS)

# The suite without Docker (part of make test)
test-cpu: $(STAMP) perf-analyzer
	$(BIN)/pytest -m "not container"

# Container tests on the offline CPU image (needs a Docker engine: .ci/docker-engine, and root
# for debootstrap); part of make test
test-container: $(STAMP)
	images/build-cpu-image
	TESTCONTAINERS_RYUK_DISABLED=true $(BIN)/pytest -m container

# Debian packages the suite drives as real parts: chromium (the web UI test), nginx (the
# ingress in front of Triton replicas) and faketime (a Locust worker's clock set off); on a
# fresh Debian machine 27 packages, 414 MB (README.md). Installed where missing, as root or
# through password-less sudo; otherwise make stops and says what to run.
test-deps:
	@missing=; \
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		missing="$$missing chromium"; \
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-light"; \
	command -v faketime >/dev/null || missing="$$missing faketime"; \
	[ -z "$$missing" ] || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=; \
		elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
		else echo "make: the suite needs Debian's$$missing and installing needs root:" \
			"run 'sudo make test-deps'" >&2; exit 1; fi; \
		echo "make: installing Debian's$$missing for the suite"; \
		$$SUDO apt-get update -q </dev/null && DEBIAN_FRONTEND=noninteractive \
			$$SUDO apt-get install -y -q --no-install-recommends $$missing </dev/null; }

chromium: test-deps

# perf_analyzer 2.51, the bundled server's release, unpacked from the tritonclient 2.51.0 wheel
# into .tools/perf_analyzer/ with its two libraries (libb64 from Debian, libcudart.so.12 from
# the nvidia-cuda-runtime-cu12 wheel) behind a wrapper; the environment's tritonclient stays
# as it is. A no-op when it is there; says what to run when it cannot install.
perf-analyzer:
	$(TOOL_PYTHON) benchmarks/perf_analyzer_tool.py

# The README's screenshots of the web UI's Triton tab, taken by its browser test
screenshots: $(STAMP) chromium
	PYTEST_TRITON_SCREENSHOTS=docs/images $(BIN)/pytest tests/load/test_web_ui.py -k chromium

PYTHON_DIRS := pytest_triton tests examples locustfiles benchmarks conftest.py setup.py
lint: $(STAMP)
	$(BIN)/ruff check $(PYTHON_DIRS)
	$(BIN)/ruff format --check $(PYTHON_DIRS)
	$(BIN)/mypy

# pytest-benchmark round trips per format x protocol x batch size; compare with
# `$(BIN)/pytest benchmarks --benchmark-compare`
bench: $(STAMP)
	$(BIN)/pytest benchmarks --benchmark-autosave

# Locust against wrk and perf_analyzer on a trivial model (installs Debian's wrk when missing)
bench-loadgen: $(STAMP) perf-analyzer
	command -v wrk >/dev/null || apt-get install -y wrk
	$(BIN)/python benchmarks/loadgen_vs_wrk.py --duration 10 --repeat 3

# The same artifact in-process vs served (1 and 8 clients, per shared-memory transport)
bench-serving: $(STAMP)
	$(BIN)/python benchmarks/serving_overhead.py --repeat 3 --duration 5

# The GPU proof (docs/gpu.md), on a GPU machine after `source .gpu/setup.sh`: the examples gate
# at fp32 and fp16, the GPU tests, Locust, serving_overhead and triton-tune on the GPU, within
# 8 minutes; gpu-proof.tar.gz and gpu-proof-summary.md land in $OUT (else ./gpu-proof). Its
# python3 is the machine's own (no venv): the kit put the project on PYTHONPATH.
GPU_PROOF_OUT ?= $(or $(OUT),gpu-proof)
gpu-proof:
	$(PYTHON) benchmarks/gpu_proof.py --out $(GPU_PROOF_OUT)

# triton-perf against perf_analyzer on one server, the statistics API as referee
bench-perf-analyzer: $(STAMP) perf-analyzer
	$(BIN)/python benchmarks/vs_perf_analyzer.py --model trivial --concurrency 8
	$(BIN)/python benchmarks/vs_perf_analyzer.py --model dlrm --batch 256 --concurrency 4

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(GATE_REPORT)
