# Two entry points: `make run` (a local cluster) and `make test` (everything CI runs).
# Both create .venv on first use; nothing but Python 3.11+ and make is needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXTRAS ?= dev,spark,loadtest,tiered
# The pure modules (mypy --strict, no I/O): ONE list, the import contract "pure" in
# pyproject.toml, read by tests/pure_modules.py when typecheck runs.
PURE   ?= $(shell $(BIN)/python -m tests.pure_modules)
SEEDS  ?= 1000
PYTEST_ARGS ?=
# The raft core (every module of raft/core/): `coverage-core` holds it to 100% branch coverage.
RAFT_CORE_COV := --cov=raft.core

.PHONY: venv run test lint typecheck imports unit sim clean coverage-core

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/rip5 dev $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict $(PURE)
	$(BIN)/mypy rip5 protocol angelia_rpc raft storage_node nameserver broker connector loadtest spark_batch tests

imports: $(STAMP)
	$(BIN)/lint-imports

test: lint typecheck imports coverage-core
	$(BIN)/python -m pytest $(PYTEST_ARGS)

coverage-core: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/raft_core $(RAFT_CORE_COV) \
		--cov-branch --cov-report=term-missing:skip-covered --cov-fail-under=100

sim: $(STAMP)
	RIP5_SIM_SEEDS=$(SEEDS) $(BIN)/python -m pytest -m sim $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
