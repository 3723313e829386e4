# Tern. Two commands for a new clone:
#   make demo   set up and run the whole pipeline locally (moto as the local AWS) with a report
#   make test   set up and run every test (Rust unit + integration on moto, receiver examples, infra)
# Everything is installed by these files: a Python venv with moto (requirements-dev.txt),
# npm packages for infra/ and the Node receiver example, crates by cargo.

PYTHON ?= python3
VENV   := .venv
CARGO  ?= cargo

.PHONY: demo test venv build clients clients-deps test-clients test-rust test-moto test-receivers test-infra test-console test-portal chromium browser-deps console-screenshots portal-screenshots bench-portal fmt lint clean bench bench-tracing bench-health bench-isolation bench-requests bench-rate bench-pacing bench-relay bench-reach bench-scale soak package package-venv openapi bench-api

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
	$(MAKE) --no-print-directory test-moto || status=1; \
	$(MAKE) --no-print-directory test-receivers || status=1; \
	$(MAKE) --no-print-directory test-infra || status=1; \
	$(MAKE) --no-print-directory test-console || status=1; \
	$(MAKE) --no-print-directory test-portal || status=1; \
	$(MAKE) --no-print-directory test-clients || status=1; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$status

# The browser tests run in test-console and test-portal (they need Chromium), not twice.
# clients-deps: tests/tests/clients.rs runs the TypeScript client's end-to-end program.
test-rust: venv clients-deps
	# The real Lambda binaries, for tests/tests/real_binaries.rs (run under the Runtime API emulator),
	# and the `tern` tool, for tests/tests/fair_queue.rs (`tern replay`).
	$(CARGO) build -p tern-sender -p tern-relay -p tern-relay-pg -p tern-replay -p tern-api-fn
	$(CARGO) build -p tern-cli --bin tern
	$(CARGO) test --workspace --all-targets --no-fail-fast -- --skip browser_console --skip browser_portal
	# tern local / tern demo are behind tern-cli's `local` feature: their tests too.
	$(CARGO) test -p tern-cli --features local --test local_mode
	# tern-outbox's `opentelemetry` feature: the writer takes the current span's trace context.
	$(CARGO) test -p tern-outbox --features opentelemetry --test current_trace
	$(CARGO) test --workspace --doc

# Concurrent SQS stress test of the local AWS (tools/moto_server.py); about 30 s on 2 cores.
test-moto: venv
	$(VENV)/bin/python tools/test_moto_server.py

test-receivers: venv
	PYTHON=$(CURDIR)/$(VENV)/bin/python examples/receivers/check.sh

test-infra: venv
	$(MAKE) -C infra test CFN_LINT=$(CURDIR)/$(VENV)/bin/cfn-lint

# Benchmarks (not part of `make test`): release builds of the three functions and the
# hello-world reference, then every figure against its reference in the same run.
# Writes $(BENCH_OUT)/report.md (also printed) and report.json. About 14 minutes after
# the build on 2 cores (4.5 of them the endpoint-health runs, ~4 the relay at fan-out scale); `make package` first adds the arm64 zip sizes.
CARGO_TARGET ?= $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)
BENCH_OUT ?= $(CARGO_TARGET)/bench
BENCH_ARGS ?=
FUNCTIONS := -p tern-sender -p tern-relay -p tern-replay -p tern-api-fn

bench: venv
	$(CARGO) build --release $(FUNCTIONS) -p tern-bench-hello -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --bin-dir $(CARGO_TARGET)/release \
	  --lambda-dir $(CARGO_TARGET)/lambda-zip --out $(BENCH_OUT) $(BENCH_ARGS)

# Only what tracing costs (issue 30; also part of `make bench`): the sender's CPU per delivery
# and the sender's and relay's cold starts, tracing on against off. Writes
# $(BENCH_OUT)/tracing.md (also printed). About a minute.
bench-tracing: venv
	$(CARGO) build --release -p tern-sender -p tern-relay -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --bin-dir $(CARGO_TARGET)/release --out $(BENCH_OUT) tracing

# Only the endpoint-health benchmark (also part of `make bench`): a dead endpoint's POST
# count with and without the breaker, and a healthy endpoint's latency next to a dead one,
# in local mode, then the same on in-memory ports (bench-isolation). Writes
# $(BENCH_OUT)/health.md (also printed) and health.json. About 12 minutes.
bench-health: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) health

# Only the noisy-neighbour scenario on in-memory ports (issue 29; also part of bench-health
# and `make bench`): the real sender handler in Lambda-like instances over an SQS model,
# a healthy endpoint's p50/p95/p99 next to a dead one (503, refused, never answers) and
# next to a healthy neighbour with the same traffic (the control). No moto. Writes
# $(BENCH_OUT)/isolation.md (also printed) and isolation.json. About 7 minutes;
# ISOLATION_DEAD=503,refused,timeout picks the kinds.
ISOLATION_DEAD ?=
bench-isolation:
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) health --in-memory \
	  $(if $(ISOLATION_DEAD),--dead $(ISOLATION_DEAD))

# Only the AWS requests per delivery (also part of `make bench`): the happy, retry and
# dead-letter scenarios counted on the wire. Writes $(BENCH_OUT)/requests.md (also printed).
bench-requests: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) requests

# Only the relay at fan-out scale (also part of `make bench`): the real relay binary, one
# event x 500 endpoints x 256 KiB and 100 events x 500 endpoints; peak RSS, time,
# invocations, messages. Writes $(BENCH_OUT)/relay.md.
bench-relay: venv
	$(CARGO) build --release -p tern-relay -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --bin-dir $(CARGO_TARGET)/release --out $(BENCH_OUT) relay

# Only the rate limit per endpoint (also part of `make bench`): a burst of 1,000 deliveries
# to an endpoint limited to 10 per second, 4 concurrent sender batches in local mode; the
# busiest one-second window at the receiver, the time to deliver all, lost, requests per
# delivery. Writes $(BENCH_OUT)/rate.md. About 2-6 minutes.
bench-rate: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) rate

# Only adaptive pacing (also part of `make bench`): bursts of 200 deliveries to receivers
# that take 5, 50 or all requests a second (429 Retry-After: 1 beyond), 20 concurrent
# sender batches in local mode, real time; refused requests, time against the ideal, the
# learnt pace each second. Writes $(BENCH_OUT)/pacing.md. About 2-4 minutes.
bench-pacing: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) pacing

# Only the Tern API (also part of `make bench`): each route's latency in local mode, p50 and
# p95, against the same port calls made directly, and a publish's cost. Writes
# $(BENCH_OUT)/api.md. About two minutes.
# The customer portal's pages: weight (HTML+CSS+JS, gzip), render time, AWS calls per view.
bench-portal: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) portal

bench-api: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) api

# The scale meter (issue 29; not part of `make bench`): the real relay and sender binaries
# in local mode behind a proxy that records every AWS request with its table, partition key
# (and index key) and capacity units, in four scenarios (a 5,000-endpoint fan-out; a hot
# endpoint healthy, answering 429, then dead; 10,000 endpoints over 100 tenants with mixed
# batches; a 10x burst), projected to 10,000 deliveries/s against AWS's limits, with the
# cost per million (docs/scale.md). Writes $(BENCH_OUT)/scale.md (also printed) and
# scale.json. About 14 minutes on 2 busy cores after the build, half of it the fan-out.
# SCALE_ARGS='--target 20000 --hot 5000 ...' changes the target (tern-bench scale --help).
# SCALE_CHECKOUT=<path of another checkout> measures that checkout's sender and relay
# (release-built there first) and its settings, with this checkout's meter and local mode
# (docs/scale.md, "Another checkout").
SCALE_CHECKOUT ?=
SCALE_ARGS ?=
SCALE_FROM = $(if $(SCALE_CHECKOUT),$(SCALE_CHECKOUT),$(CURDIR))

bench-scale: venv
	$(CARGO) build --release -p tern-bench $(if $(SCALE_CHECKOUT),,-p tern-sender -p tern-relay)
	$(if $(SCALE_CHECKOUT),cd $(SCALE_CHECKOUT) && env -u CARGO_TARGET_DIR $(CARGO) build --release -p tern-sender -p tern-relay)
	$(CARGO_TARGET)/release/tern-bench --out $(BENCH_OUT) \
	  $(if $(SCALE_CHECKOUT),,--bin-dir $(CARGO_TARGET)/release) scale --checkout $(SCALE_FROM) \
	  --label "$$(git -C $(SCALE_FROM) rev-parse --abbrev-ref HEAD)@$$(git -C $(SCALE_FROM) rev-parse --short HEAD)" \
	  $(SCALE_ARGS)

# The fault soak (not part of `make test`; 5-12 minutes on 2 cores): 2,940 deliveries to
# endpoints of every health through local mode with AWS faults, sender panics, duplicate
# messages and poller restarts, then every pair accounted for with `tern audit`'s code.
# Prints the seed; SOAK_ARGS='--seed <n>' repeats a run's choices. Writes
# $(SOAK_OUT)/soak-<seed>.json. Exit 1 when a pair is unaccounted or duplicates exceed 1 %.
SOAK_OUT ?= $(CARGO_TARGET)/soak
SOAK_ARGS ?=

soak: venv
	$(CARGO) build -p tern-soak
	$(CARGO_TARGET)/debug/tern-soak --out $(SOAK_OUT) $(SOAK_ARGS)

# Only what issue 20's receiver settings cost (not part of `make bench`): requests per
# delivery with OAuth2 client credentials on (no auth, tokens of 1 h and of 4 s; token
# requests, receiver POSTs, AWS calls) and the CPU time of v1 / v1a / both signatures per
# delivery. Writes $(BENCH_OUT)/reach.md (also printed). About two minutes.
bench-reach: venv
	$(CARGO) build --release -p tern-bench
	$(CARGO) build --release -p tern-core --example sign_cost
	$(CARGO_TARGET)/release/tern-bench --aws-deliveries 200 --out $(BENCH_OUT) reach
	$(CARGO_TARGET)/release/examples/sign_cost | tee -a $(BENCH_OUT)/reach.md

# The documented build path: cargo-lambda and Zig from requirements-package.txt (a venv
# of their own), the aarch64 target from rustup, then only the function binaries (the three
# delivery functions, the API, the console, and the hello-world reference) for arm64 into
# $(CARGO_TARGET)/lambda/<name>/bootstrap, zipped once more as Lambda takes them into
# $(CARGO_TARGET)/lambda-zip/ (tools/zip_lambda.py; sizes printed), then the CDK app
# synthesized with those artifacts (tern:prebuiltArtifactsDir). 6-11 min on 2 cores.
PACKAGE_VENV := .venv-package
package-venv: $(PACKAGE_VENV)/.installed

$(PACKAGE_VENV)/.installed: requirements-package.txt
	$(PYTHON) -m venv $(PACKAGE_VENV)
	$(PACKAGE_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-package.txt
	@touch $@

package: package-venv
	rustup target add aarch64-unknown-linux-gnu
	# tern-http's test seams (feature test-support: a test CA, a loopback NAT64 gateway) are
	# for tern-tests only: refuse a package whose functions would compile them in.
	@if $(CARGO) tree $(FUNCTIONS) -p tern-console-fn -e features -i tern-http | grep -q test-support; then \
		echo "make package: tern-http's test-support feature reaches a function crate"; exit 1; fi
	PATH="$(CURDIR)/$(PACKAGE_VENV)/bin:$$PATH" $(CARGO) lambda build --release --arm64 \
	  $(FUNCTIONS) -p tern-relay-pg -p tern-console-fn -p tern-bench-hello
	$(PYTHON) tools/zip_lambda.py $(CARGO_TARGET)/lambda $(CARGO_TARGET)/lambda-zip \
	  sender relay relay-pg replay console api hello-world
	$(MAKE) -C infra deps
	cd infra && npx cdk synth --quiet -o $(CARGO_TARGET)/package-cdk.out \
	  -c tern:prebuiltArtifactsDir=$(CARGO_TARGET)/lambda -c tern:alarmEmail=ops@example.com
	@echo "synthesized with the arm64 artifacts of $(CARGO_TARGET)/lambda into $(CARGO_TARGET)/package-cdk.out"

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

# Re-makes docs/operating.md's console screenshots (docs/console/*.png) with the same test.
console-screenshots: venv chromium browser-deps
	TERN_SCREENSHOTS_DIR=$(CURDIR)/docs/console $(CARGO) test -p tern-tests --test console_browser

# The customer portal in a real browser: a customer adds an endpoint, tests it, sees the
# failures, recovers the window; the portal in an iframe of an allowed and a refused parent.
test-portal: venv chromium browser-deps
	$(CARGO) test -p tern-tests --test portal_browser

# Re-makes the portal's screenshots (docs/portal/*.png, docs/portal.md) with the same test.
portal-screenshots: venv chromium browser-deps
	TERN_SCREENSHOTS_DIR=$(CURDIR)/docs/portal $(CARGO) test -p tern-tests --test portal_browser

# Writes shared/tern-api/openapi.json again from the code (the Tern API's document, which
# `cargo test -p tern-api --test openapi` checks), then the clients generated from it.
openapi:
	TERN_WRITE_OPENAPI=1 $(CARGO) test -p tern-api --test openapi
	$(MAKE) --no-print-directory clients

# The clients in clients/ (clients/README.md): npm packages of the TypeScript one.
clients-deps: clients/typescript/node_modules/.installed

clients/typescript/node_modules/.installed: clients/typescript/package.json clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund
	@touch $@

# Generates the clients' code from shared/tern-api/openapi.json again: the TypeScript types
# (openapi-typescript) and the Python package tern_api (openapi-python-client, pinned in
# requirements-dev.txt with the ruff its post hooks run). Both are committed; test-clients
# fails while they differ from what these commands make.
clients: venv clients-deps
	cd clients/typescript && npm run --silent generate
	cd clients/python && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" openapi-python-client generate \
	  --path ../../shared/tern-api/openapi.json --meta none --config openapi-python-client.yaml \
	  --output-path tern_api --overwrite

# The clients' own tests: each outbox builder reproduces clients/outbox/vectors byte for
# byte and validates them against the schema (Rust, node:test + ajv, pytest + jsonschema);
# the generated code matches the spec; the TypeScript sources type-check against it. Their
# end-to-end runs against local mode are tests/tests/clients.rs (test-rust).
test-clients: venv clients-deps
	cd clients/typescript && npm test
	$(VENV)/bin/python -m pytest -q clients/python/tests
	$(CARGO) test -p tern-outbox --test vectors

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets

clean:
	$(CARGO) clean
	rm -rf $(VENV) .tern infra/node_modules clients/typescript/node_modules infra/.test-out examples/receivers/node/node_modules tests/browser/node_modules
