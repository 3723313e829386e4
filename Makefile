# Tern. Two commands for a new clone:
#   make demo   set up and run the whole pipeline locally (moto as the local AWS) with a report
#   make test   set up and run every test (Rust unit + integration on moto, receiver examples, infra)
# Everything is installed by these files: a Python venv with moto (requirements-dev.txt),
# npm packages for infra/ and the Node receiver example, crates by cargo.

PYTHON ?= python3
VENV   := .venv
CARGO  ?= cargo

.PHONY: demo test venv build test-rust test-receivers test-infra fmt lint clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

build:
	$(CARGO) build --workspace --all-targets

# Built first with cargo's progress shown (a first build takes minutes; never a silent
# wait), then run quietly.
demo: venv
	@echo "make demo: building tern with local mode (cargo shows progress; minutes on a first build)..."
	$(CARGO) build -p tern-cli --features local --bin tern
	@echo "make demo: running the demo (moto as the local AWS, receivers on 127.0.0.1)..."
	$(CARGO) run --quiet -p tern-cli --features local --bin tern -- demo

# Every part runs even when an earlier one fails, so one run shows every problem.
test: venv
	@status=0; \
	$(MAKE) --no-print-directory test-rust || status=1; \
	$(MAKE) --no-print-directory test-receivers || status=1; \
	$(MAKE) --no-print-directory test-infra || status=1; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$status

test-rust: venv
	$(CARGO) test --workspace --all-targets --no-fail-fast
	$(CARGO) test --workspace --doc

test-receivers: venv
	PYTHON=$(CURDIR)/$(VENV)/bin/python examples/receivers/check.sh

test-infra: venv
	$(MAKE) -C infra test CFN_LINT=$(CURDIR)/$(VENV)/bin/cfn-lint

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets

clean:
	$(CARGO) clean
	rm -rf $(VENV) .tern infra/node_modules infra/.test-out examples/receivers/node/node_modules
