# Fingertip. `make run` and `make test` work on a fresh machine: both depend on setup.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup run test test-fast lint format bench clean

setup: $(STAMP)

# Re-install whenever pyproject.toml changes; the stamp keeps a second `make` quick.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# The daemon on this machine with the simulated target, on 127.0.0.1:8080.
run: setup
	$(BIN)/fingertipd --config etc/fingertip.dev.toml

# Pure and service tiers, then the kernel tier.
test: setup
	$(BIN)/pytest -q
	$(MAKE) --no-print-directory kernel-test

# Pure and service tiers only (quick feedback while developing).
test-fast: setup
	$(BIN)/pytest -q -x

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict gadget daemon

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .fingertip .pytest_cache .mypy_cache .ruff_cache *.egg-info
