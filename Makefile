# Two commands a newcomer needs: `make serve` and `make test`.
# Each creates the virtual environment and installs on first use.
PYTHON ?= python3.11
# Where torch==2.13.0's CPU build comes from: empty, the configured index (it serves the CPU
# wheel on machines set up like ours); elsewhere `make TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[dev]"  # dev includes server: everything make serve and make test need
	touch $(STAMP)

.PHONY: install serve test soak lint bench
install: $(STAMP)

serve: $(STAMP)
	$(BIN)/brigade serve

# The lean install (tests/api/test_lean_install.py: `pip install brigade`, no torch or Ray) in a venv
# of its own, made once here rather than by the test: resolving its requirements is the slow part.
LEAN := .venv-lean
$(LEAN)/.installed: pyproject.toml | $(STAMP)
	$(BIN)/python -m tests.lean_venv $(LEAN)
	touch $@

# Every run keeps its per-test times: the slowest 25 printed (pyproject.toml's addopts), all of them
# in reports/junit-*.xml, and the 25 slowest modules after it (docs/testing.md: the suite's budget).
# Two phases: first every module but the `alone` ones in JOBS pytest processes (pytest-xdist,
# --dist loadfile: a module's tests stay together, with their shared fixtures; each process has
# its own session Ray cluster; the slowest modules first, tests/module_order.py; each process's
# modules and their times in reports/timeline.tsv), then the `alone` modules one after another
# with nothing beside them: the scenarios whose bounds (a failover, a lease, a hang found, a
# drain's deadline) are timed on a quiet machine, and those that start Ray nodes of their own.
# JOBS=1: all serially.
JOBS ?= 2
test: $(STAMP) $(LEAN)/.installed
	@status=0; mkdir -p reports; rm -f reports/junit*.xml reports/timeline.tsv; \
	export BRIGADE_TEST_TIMELINE=reports/timeline.tsv; \
	$(BIN)/python -m pytest -q tests -m "not soak and not alone" --junitxml=reports/junit-shared.xml \
		$(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile --no-loadscope-reorder) || status=$$?; \
	$(BIN)/python -m pytest -q tests -m "alone" --junitxml=reports/junit-alone.xml || status=$$?; \
	$(BIN)/python -m tests.module_times reports/junit-shared.xml reports/junit-alone.xml || true; \
	$(BIN)/python -m tests.module_times --timeline reports/timeline.tsv || true; \
	exit $$status

# 100 jobs of 4 tenants under faults, through two replicas on Postgres (127.0.0.1:5432) whose
# leader is killed twice among them (tests/soak, about 5.5 minutes): out of `make test`; .ci/run
# runs it after the suite.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -rP -m soak tests/soak  # -rP: the report, passed or not

# Style, likely bugs and import order (ruff), types (mypy), and who may import
# whom (import-linter: the layers of docs/architecture.md; torch and ray out of the API process
# and the CLI). All three run; the target fails if any of them did. Ruff's scope
# (api, service, workers, checkpoints, tools) is `include` in pyproject.toml's [tool.ruff].
lint: $(STAMP)
	@status=0; \
	$(BIN)/ruff check || status=1; \
	$(BIN)/mypy || status=1; \
	$(BIN)/lint-imports --no-logo || status=1; \
	exit $$status

# Every figure of docs/benchmarks.md and its plot (docs/*.png); ARGS=--quick for a smoke run.
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)
