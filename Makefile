# Two entry points: `make run` (a local cluster) and `make test` (everything CI runs).
# Both create .venv on first use; nothing but Python 3.11+ and make is needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXTRAS ?= dev,spark,loadtest,tiered
# The pure modules: mypy --strict, no I/O (see pyproject.toml import contracts).
PURE   ?= protocol rip5/config.py raft/types.py raft/errors.py \
          raft/core/config.py raft/core/confchange.py raft/core/replica.py raft/core/follower.py raft/core/leader.py raft/core/log.py raft/core/memory_log.py raft/core/node.py raft/core/progress.py raft/core/quorum.py raft/core/read_only.py raft/core/tracker.py \
          raft/wal/format.py raft/host/wire.py raft/host/multiraft.py raft/host/collaborators.py raft/wal/group_index.py raft/wal/entry_cache.py \
          raft/host/group_state.py raft/host/outgoing.py raft/host/compaction.py raft/wal/retention.py storage_node/api_convert.py nameserver/queries.py nameserver/validation.py \
          angelia_rpc/errors.py angelia_rpc/framing.py angelia_rpc/codec angelia_rpc/service.py angelia_rpc/cluster_services.py angelia_rpc/config.py \
          storage_node/errors.py storage_node/partition storage_node/reporting.py storage_node/reconcile.py storage_node/store/base.py storage_node/store/memory.py \
          nameserver/errors.py nameserver/names.py nameserver/codec.py nameserver/records.py \
          nameserver/commands.py nameserver/state.py nameserver/placement.py nameserver/api_convert.py nameserver/balancer.py nameserver/moves.py \
          broker/domain.py broker/errors.py broker/processor/receipt.py \
          broker/processor/filter.py broker/processor/validation.py \
          broker/processor/polling.py broker/processor/selector.py broker/grpc/convert.py broker/grpc/wire.py \
          broker/processor/checkback.py broker/processor/transaction_id.py \
          broker/services/cluster_convert.py \
          loadtest/scenarios.py loadtest/report.py
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
