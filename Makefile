# The two commands of the README: `make run` and `make test`. Everything else is a helper.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PACKAGES := controlplane actors policies serve clusters benchmarks
PYTEST_ARGS ?=
# The tests without Ray spread over TEST_WORKERS processes (pytest-xdist); then the Ray tests run
# one after another, as they share the session's Ray and the machine's ports. An empty selection
# (exit 5, e.g. PYTEST_ARGS naming only Ray tests) is not a failure; both steps always run.
TEST_WORKERS ?= 2

.PHONY: run test lint typecheck unit venv data clean browser sandbox netns mutation mutation-sample

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

data: $(STAMP)
	$(BIN)/spotplane data fetch --if-missing

run: data sandbox
	$(BIN)/spotplane up --demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	rc=0; \
	$(BIN)/pytest -n $(TEST_WORKERS) -m "not ray" --durations=10 $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	$(BIN)/pytest -m ray --durations=20 $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

# The dashboard's browser tests drive the distribution's chromium (root and apt, as in CI).
browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)

# `spotplane up` runs tenants' jobs inside bubblewrap (docs/security.md); root and apt, as in CI.
sandbox:
	command -v bwrap >/dev/null || (apt-get update && apt-get install -y --no-install-recommends bubblewrap)

# The boot emulator runs each launched VM's bootstrap in its own network namespace (`ip netns`).
netns:
	command -v ip >/dev/null || (apt-get update && apt-get install -y --no-install-recommends iproute2)

test: lint typecheck browser sandbox netns unit

# Mutation testing, a standing check but not part of `make test` (slow; docs/mutation.md).
# Config in pyproject's [tool.mutmut]; results are cached in mutants/ (rm -rf it to start over).
# MUTANTS selects mutants, e.g. MUTANTS='controlplane.reconcile.jobs*'; MUTATION_JOBS workers.
MUTANTS ?=
MUTATION_JOBS ?= 2
mutation: $(STAMP)
	SPOTPLANE_DATA_DIR=$${SPOTPLANE_DATA_DIR:-$$($(BIN)/python -c 'from controlplane.core.config import data_dir; print(data_dir())')} \
	  nice -n 10 $(BIN)/mutmut run --max-children $(MUTATION_JOBS) $(MUTANTS)
	$(BIN)/mutmut results

# The sampled run (docs/mutation.md, "Sampled run"): a seeded random sample of mutants per
# stratum, run, then tabled with the hand classification in docs/mutation-survivors.tsv.
MUTATION_SEED ?= 2026
mutation-sample: $(STAMP)
	mkdir -p mutants
	$(BIN)/python -m tools.mutation_sample --generate --seed $(MUTATION_SEED) > mutants/sample.txt
	SPOTPLANE_DATA_DIR=$${SPOTPLANE_DATA_DIR:-$$($(BIN)/python -c 'from controlplane.core.config import data_dir; print(data_dir())')} \
	  nice -n 15 $(BIN)/mutmut run --max-children $(MUTATION_JOBS) $$(cat mutants/sample.txt)
	$(BIN)/python -m tools.mutation_report mutants/sample.txt docs/mutation-survivors.tsv

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache mutants
