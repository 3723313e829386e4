# Tern. Two commands for a new clone:
#   make demo   set up and run the whole pipeline locally (moto as the local AWS) with a report
#   make test   set up and run every test (Rust unit + integration on moto, receiver examples, infra)
# Everything is installed by these files: a Python venv with moto (requirements-dev.txt),
# npm packages for infra/ and the Node receiver example, crates by cargo.

PYTHON ?= python3
VENV   := .venv
CARGO  ?= cargo

.PHONY: demo test venv build test-rust test-receivers test-infra test-console chromium browser-deps console-screenshots fmt lint clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

build:
	$(CARGO) build --workspace --all-targets

demo: venv
	$(CARGO) run --quiet -p tern-cli --features local --bin tern -- demo

# Every part runs even when an earlier one fails, so one run shows every problem.
test: venv
	@status=0; \
	$(MAKE) --no-print-directory test-rust || status=1; \
	$(MAKE) --no-print-directory test-receivers || status=1; \
	$(MAKE) --no-print-directory test-infra || status=1; \
	$(MAKE) --no-print-directory test-console || status=1; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$status

# The browser test runs in test-console (it needs Chromium), not twice.
test-rust: venv
	$(CARGO) test --workspace --all-targets --no-fail-fast -- --skip browser_console
	$(CARGO) test --workspace --doc

test-receivers: venv
	PYTHON=$(CURDIR)/$(VENV)/bin/python examples/receivers/check.sh

test-infra: venv
	$(MAKE) -C infra test CFN_LINT=$(CURDIR)/$(VENV)/bin/cfn-lint

# Headless Chromium for the console's browser test: Debian's package (CI runs as root on
# Debian). Installed when missing; fails loudly when it cannot be.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "installing chromium (apt-get)"; \
		apt-get update -qq && apt-get install -y -qq chromium; \
	fi
	@test -x /usr/bin/chromium || { echo "chromium is required at /usr/bin/chromium and could not be installed"; exit 1; }

browser-deps: tests/browser/node_modules/.installed

tests/browser/node_modules/.installed: tests/browser/package.json tests/browser/package-lock.json
	cd tests/browser && npm ci --no-audit --no-fund
	@touch $@

# The operator's console in a real browser: widgets rendered by Chromium, Replay clicked in
# local mode, the DLQ emptied and the events delivered.
test-console: venv chromium browser-deps
	$(CARGO) test -p tern-tests --test console_browser

# Re-makes the README's console screenshots (docs/console/*.png) with the same test.
console-screenshots: venv chromium browser-deps
	TERN_SCREENSHOTS_DIR=$(CURDIR)/docs/console $(CARGO) test -p tern-tests --test console_browser

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets

clean:
	$(CARGO) clean
	rm -rf $(VENV) .tern infra/node_modules infra/.test-out examples/receivers/node/node_modules tests/browser/node_modules
