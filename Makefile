# Fingertip. `make run` and `make test` work on a fresh machine: both depend on setup.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup xkb-setup browser-setup run test test-fast kernel-setup kernel-test lint format bench clean
.PHONY: systemd-setup board-setup board-test board-test-small board-power-cuts test-under-load
.PHONY: deploy undeploy
.PHONY: arm64-setup arm64-test desktop-setup desktop-test

setup: $(STAMP)

# Platforms: Debian 12 or Ubuntu 22.04 and later (apt), Python >= 3.11. The apt lines run as
# root, or through sudo for anyone else (asked only when a package is missing). The VM tiers
# (kernel, board, desktop, arm64) need root itself: they say so and skip.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT  := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

# Debian's XKB layouts, Compose table and libxkbcommon headers: the `xkbcommon` bindings build
# against them, the layout generator and the simulated target read them. The package list is
# refreshed only when the install fails.
XKB_PACKAGES := libxkbcommon-dev xkb-data libx11-data
xkb-setup:
	@test -f /usr/include/xkbcommon/xkbcommon-compose.h -a -f /usr/share/X11/xkb/rules/evdev \
		-a -f /usr/share/X11/locale/en_US.UTF-8/Compose || \
		$(APT) install -y $(XKB_PACKAGES) || ($(APT) update && $(APT) install -y $(XKB_PACKAGES))

# Re-install whenever pyproject.toml changes; the stamp keeps a second `make` quick.
$(STAMP): pyproject.toml | xkb-setup
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,ocr]'
	touch $@

# The daemon on this machine with the simulated target, on 127.0.0.1:8080; `make run PORT=8081`
# serves on another port (PORT counts only on the command line, as for deploy, where it is the
# board's ssh port). It reaches fingertipd through the environment, verbatim (see deploy below),
# and fingertipd refuses what is not a port.
# On loopback the dev config gives full access (shell included) without a token to anyone on
# this machine: `make run REQUIRE_TOKEN=1` asks for the pairing token there too.
run: export RUN_PORT = $(if $(filter command line,$(origin PORT)),$(value PORT))
run: export RUN_TOKEN = $(if $(filter 1 yes true,$(REQUIRE_TOKEN)),--require-token)
run: setup
	$(BIN)/fingertipd --config etc/fingertip.dev.toml $${RUN_PORT:+--port="$$RUN_PORT"} $$RUN_TOKEN

# Every tier: the whole board under QEMU (make deploy onto it and the acceptance checks), then
# the arm64 and desktop tiers, in the background from the start, beside the pure and service
# tiers, the kernel tier and the memory benchmark: the suite takes about the longer line's
# time, not the sum (tests/run_all.py).
# Each VM tier skips loudly where it cannot run, and fails instead under CI=true.
test: setup browser-setup systemd-setup
	$(BIN)/python tests/run_all.py

# Debian's chromium for the Tool Lab browser test (Playwright drives it; never a browser
# download of Playwright's own). The package list is refreshed only when the install fails.
browser-setup:
	@test -x /usr/bin/chromium || $(APT) install -y chromium || \
		($(APT) update && $(APT) install -y chromium)

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

# Desktop target tier (tests/desktop, docs/desktop-target.md): the kernel tier's VM running X.Org,
# udev and a Tk application, driven only through Fingertip's gadget and seen only through a V4L2
# loopback device. desktop-setup adds its apt packages and builds v4l2loopback for the guest's
# kernel into the kernel cache; DESKTOP_TEST_ARGS passes pytest arguments (e.g. -k typing).
desktop-setup: setup
	$(BIN)/python tests/desktop/setup.py

desktop-test: setup
	$(BIN)/python tests/desktop/run.py

# systemd-analyze, for the unit files' `verify` in the pure tier (Debian ships it in systemd).
systemd-setup:
	@command -v systemd-analyze >/dev/null || $(APT) install -y systemd || \
		($(APT) update && $(APT) install -y systemd)

# Board VM (tests/board): a Debian board with systemd and sshd under QEMU, image cached in
# ~/.cache/fingertip/board; board-test deploys onto it with `make deploy` and runs the checks.
# BOARD_TEST_ARGS passes pytest arguments (e.g. BOARD_TEST_ARGS=-x).
board-setup: setup
	$(BIN)/python tests/board/image.py

board-test: setup
	$(BIN)/python tests/board/run.py

# The board VM at 256 MB, a board without OCR ([ocr] enabled = "auto" turns it off there):
# every check but OCR's. Not in `make test` (see tests/board/run.py).
board-test-small: setup
	BOARD_VM_MEMORY_MB=256 $(BIN)/python tests/board/run.py

# Power cuts on the board VM (tests/board/power_cut.py): board-test cuts once, after its checks,
# on the VM it deployed to; this boots and deploys, then cuts BOARD_POWER_CUTS times (50), each
# one's outcome printed (~2-3 min a cut on an idle machine; the runner's limit, BOARD_TEST_TIMEOUT,
# 1800 s and 600 s a cut: its 2700 s default for `make test` stopped the first 50-cut run at 10).
board-power-cuts: setup
	cuts=$${BOARD_POWER_CUTS:-50}; BOARD_POWER_CUTS=$$cuts \
	BOARD_TEST_TIMEOUT=$${BOARD_TEST_TIMEOUT:-$$((1800 + 600 * cuts))} \
	$(BIN)/python tests/board/run.py -k power_cut

# aarch64 tier (tests/arm64): an arm64 Debian root run by qemu-user through binfmt_misc, cached
# in ~/.cache/fingertip/arm64 (apt installs qemu-user-static and debootstrap); arm64-test
# installs the daemon there from make deploy's aarch64 wheelhouse, starts it, calls
# health_check and reads one frame's text with OCR. docs/arm64.md.
arm64-setup: setup
	$(BIN)/python tests/arm64/root.py

arm64-test: setup
	$(BIN)/python tests/arm64/run.py

# The VM tiers with one of the machine's cores kept busy for the whole run (a CPU hog pinned
# to core 0), as on a shared CI runner or a laptop doing other work: they must pass so too.
test-under-load: setup
	@$(BIN)/python -c 'while True: pass' & hog=$$!; \
	taskset -pc 0 $$hog >/dev/null 2>&1 || true; \
	trap 'kill $$hog 2>/dev/null' EXIT INT TERM; \
	echo "test-under-load: CPU hog pid $$hog on core 0"; \
	$(MAKE) --no-print-directory kernel-test && $(MAKE) --no-print-directory board-test && \
	$(MAKE) --no-print-directory desktop-test

# make deploy HOST=user@board [PORT=22] [SSH_CONFIG=file]; make undeploy HOST=... (deploy/).
# HOST and PORT count only on the command line: both are common environment variables. They
# reach deploy.py through the environment, taken verbatim ($(value)): nothing of theirs is
# ever part of the recipe's shell command, so no quote in them can end it (and `--host=`: a
# leading '-' is not an option of deploy.py either); deploy.py checks them before ssh runs.
unexport HOST PORT SSH_CONFIG  # make would expand them (a $(shell ...) too) to export them
deploy undeploy: export DEPLOY_HOST = $(if $(filter command line,$(origin HOST)),$(value HOST))
deploy undeploy: export DEPLOY_PORT = $(if $(filter command line,$(origin PORT)),$(value PORT),22)
deploy undeploy: export DEPLOY_SSH_CONFIG = $(value SSH_CONFIG)
DEPLOY_ARGS = --host="$$DEPLOY_HOST" --port="$$DEPLOY_PORT" --ssh-config="$$DEPLOY_SSH_CONFIG"

deploy: setup
	$(BIN)/python deploy/deploy.py deploy $(DEPLOY_ARGS)

undeploy: setup
	$(BIN)/python deploy/deploy.py undeploy $(DEPLOY_ARGS)

# Benchmarks (tests/bench/bench_*.py): each prints ratios against a baseline measured in
# the same run; nothing passes or fails on time.
bench: setup
	set -e; for f in tests/bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f; done

# The import check fails on any circle of imports in daemon/ and gadget/, those hidden inside
# functions or under TYPE_CHECKING too (tests/import_cycles.py prints each with its lines).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict gadget daemon
	$(BIN)/python tests/import_cycles.py

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .fingertip .pytest_cache .mypy_cache .ruff_cache *.egg-info
