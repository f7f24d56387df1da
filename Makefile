PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install lint clean browser

$(BIN)/python:
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) (Python >= 3.11) on PATH, or run: make PY=python3.12 ..."; exit 2; }
	$(PY) -m venv $(VENV)

# PyTorch from another package index first, e.g. the CPU-only wheels on a machine without a
# GPU (torch about 0.75 GB installed; the CUDA build's venv is 5.9 GB with NVIDIA's libraries):
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	@echo "install: scaleprobe with PyTorch, torchvision and the optional parts into $(VENV):"
	@echo "         minutes while pip downloads; with PyTorch's default (CUDA) build and its"
	@echo "         NVIDIA libraries the venv is about 5.9 GB, the CPU-only torch about 0.75 GB"
	@echo "         (make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu; README.md)"
	$(if $(TORCH_INDEX),$(BIN)/pip install --progress-bar on --index-url $(TORCH_INDEX) torch torchvision)
	$(BIN)/pip install --progress-bar on -e '.[all,test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/scaleprobe demo
	@echo "next: . $(VENV)/bin/activate  (then scaleprobe --help; or type $(BIN)/scaleprobe ...)"

# --durations: every run lists its 25 slowest tests, and the last line the suite's wall time
# against its budget (15 minutes on the 2-core reference machine; docs/BENCHMARKS.md)
test: $(STAMP) browser
	@start=$$(date +%s); $(BIN)/python -m pytest -q --durations=25 tests; rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s in all (budget 900 s on 2 cores)"; exit $$rc

# the HTML report test opens the report in headless Chromium: a set-up step of its own, run
# once (the stamp file); `rm $(CHROMIUM_STAMP)` to try again. No test installs anything.
CHROMIUM_STAMP := $(VENV)/.chromium-checked

browser: $(CHROMIUM_STAMP)

$(CHROMIUM_STAMP): scripts/ensure-chromium.sh
	@echo "browser: the HTML report test needs headless Chromium; when none is on PATH this"
	@echo "         installs the Debian package 'chromium' with apt-get (root only, once)"
	@bash scripts/ensure-chromium.sh
	@mkdir -p $(VENV) && touch $@

# the unit and architecture tests not marked slow: no training run of its own, no network
# namespace, no scheduler (budget 180 s on 2 cores); `make test` runs everything. The
# markers: -m slow, -m gpu (needs CUDA, skipped without), -m root (network namespaces)
test-fast: $(STAMP)
	@start=$$(date +%s); $(BIN)/python -m pytest -q -m "not slow" tests/unit tests/architecture; \
	rc=$$?; echo "make test-fast: $$(( $$(date +%s) - start )) s in all (budget 180 s on 2 cores)"; \
	exit $$rc

# ruff, the import floors of pyproject.toml's [tool.importlinter], mypy --strict on the
# torch-free floors and on every function body of the others ([tool.mypy], with what it leaves
# out and why; docs/ARCHITECTURE.md)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf scaleprobe-out .pytest_cache
