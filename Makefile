# Two commands a newcomer needs: `make serve` and `make test`.
# Each creates the virtual environment and installs on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

.PHONY: install serve test bench
install: $(STAMP)

serve: $(STAMP)
	$(BIN)/brigade serve

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

# Every figure of docs/benchmarks.md and its plot (docs/*.png); ARGS=--quick for a smoke run.
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)
