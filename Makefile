# Fingertip. `make run` and `make test` work on a fresh machine: both depend on setup.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup browser-setup run test test-fast kernel-setup kernel-test lint format bench clean

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
test: setup browser-setup
	$(BIN)/pytest -q
	$(MAKE) --no-print-directory kernel-test

# Debian's chromium for the Tool Lab browser test (Playwright drives it; never a browser
# download of Playwright's own). The package list is refreshed only when the install fails.
browser-setup:
	@test -x /usr/bin/chromium || DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# Pure and service tiers only (quick feedback while developing).
test-fast: setup
	$(BIN)/pytest -q -x

# Kernel tier (tests/kernel): Debian's kernel + initramfs cached in ~/.cache/fingertip/kernel.
# kernel-test runs the same setup first, then one QEMU boot that runs tests/kernel/guest;
# KERNEL_TEST_ARGS passes pytest arguments to the guest (e.g. KERNEL_TEST_ARGS="-k ecm").
kernel-setup: setup
	$(BIN)/python tests/kernel/setup.py

kernel-test: setup
	$(BIN)/python tests/kernel/run.py

# Benchmarks (tests/bench/bench_*.py): each prints ratios against a baseline measured in
# the same run; nothing passes or fails on time.
bench: setup
	set -e; for f in tests/bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f; done

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict gadget daemon

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .fingertip .pytest_cache .mypy_cache .ruff_cache *.egg-info
