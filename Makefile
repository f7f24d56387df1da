PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install lint clean

$(BIN)/python:
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) (Python >= 3.11) on PATH, or run: make PY=python3.12 ..."; exit 2; }
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/scaleprobe demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

# the tests not marked slow (each marked one takes more than ~20 s on a 2-core CPU); the
# markers: -m slow, -m gpu (needs CUDA, skipped without), -m root (network namespaces)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" tests

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf scaleprobe-out .pytest_cache
