#!/usr/bin/env bash
# Starts each receiver example (Python, Node, Rust) on a 127.0.0.1 port, once per payload
# format (raw, standard_webhooks), and sends it signed requests shaped as Tern shapes them
# (signed with PyPI standardwebhooks, as Tern signs): a new event (200), the same webhook-id
# again (200, duplicate, not reprocessed), a tampered body (400) and a few more; then checks
# each accepted event was processed once, with the right event type.
# Prints one PASS/FAIL line per case and ends with "N passed, N failed[, N skipped]";
# exits non-zero on any failure.
#
# Environment:
#   PYTHON=/path/to/python  use this interpreter (must have standardwebhooks==1.0.1) instead
#                           of creating a temporary venv
#   SKIP_NODE=1, SKIP_RUST=1  skip that example (counted as skipped)
#   CARGO_TARGET_DIR        honoured when building the Rust example
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tern-receivers.XXXXXX")
pids=()
passed=0
failed=0
skipped=0

cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

summary() {
  if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
  else
    echo "$passed passed, $failed failed"
  fi
}

setup_failed() {
  echo "FAIL setup: $*"
  failed=$((failed + 1))
}

# ---- installs (not counted in the one-minute budget) ----
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
else
  echo "creating a Python venv with standardwebhooks (set PYTHON to skip)"
  if python3 -m venv "$work/venv" &&
    "$work/venv/bin/pip" install -q --disable-pip-version-check -r "$here/python/requirements.txt"; then
    py=$work/venv/bin/python
  else
    setup_failed "python venv / pip install"
    summary
    exit 1
  fi
fi
if ! "$py" -c 'import standardwebhooks' 2>/dev/null; then
  setup_failed "$py cannot import standardwebhooks (pip install -r $here/python/requirements.txt)"
  summary
  exit 1
fi

node_ready=0
if [ "${SKIP_NODE:-}" = 1 ]; then
  echo "SKIP node: SKIP_NODE=1"
  skipped=$((skipped + 1))
elif ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  setup_failed "node/npm not found (set SKIP_NODE=1 to skip the Node example)"
elif (cd "$here/node" && npm ci --no-audit --no-fund --silent >"$work/npm.log" 2>&1); then
  node_ready=1
else
  cat "$work/npm.log"
  setup_failed "npm ci in $here/node"
fi

rust_bin=
if [ "${SKIP_RUST:-}" = 1 ]; then
  echo "SKIP rust: SKIP_RUST=1"
  skipped=$((skipped + 1))
elif ! command -v cargo >/dev/null; then
  setup_failed "cargo not found (set SKIP_RUST=1 to skip the Rust example)"
elif cargo build -q --manifest-path "$repo/Cargo.toml" -p tern-receiver --example receiver 2>"$work/cargo.log"; then
  target_dir=$(cargo metadata -q --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
    "$py" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  rust_bin=$target_dir/debug/examples/receiver
else
  cat "$work/cargo.log"
  setup_failed "cargo build -p tern-receiver --example receiver"
fi

# ---- the checks ----
secret=$("$py" -c 'import base64,os; print("whsec_" + base64.b64encode(os.urandom(32)).decode())')

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# check NAME FORMAT COMMAND...   (the port is appended to COMMAND)
check() {
  local name=$1 format=$2
  shift 2
  local port log out
  port=$(free_port)
  log=$work/$name.log
  # stdout (the "processing <id>" lines the client counts) apart from stderr (request logs),
  # so lines written by different threads cannot interleave.
  HOST=127.0.0.1 TERN_WEBHOOK_SECRET=$secret TERN_PAYLOAD_FORMAT=$format "$@" "$port" >"$log" 2>"$log.err" &
  pids+=($!)
  out=$(timeout 60 "$py" "$here/check_client.py" --name "$name" --url "http://127.0.0.1:$port/" \
    --secret "$secret" --log "$log" --format "$format" 2>&1)
  local rc=$?
  echo "$out"
  local p f
  p=$(grep -c '^PASS ' <<<"$out")
  f=$(grep -c '^FAIL ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: client exited $rc"
    f=1
  fi
  if [ "$f" -gt 0 ]; then
    echo "--- $name receiver stdout ---"
    tail -n 30 "$log"
    echo "--- $name receiver stderr ---"
    tail -n 30 "$log.err"
    echo "---"
  fi
  passed=$((passed + p))
  failed=$((failed + f))
}

for format in raw standard_webhooks; do
  check "python-$format" "$format" "$py" "$here/python/receiver.py"
  if [ "$node_ready" = 1 ]; then
    check "node-$format" "$format" node "$here/node/receiver.mjs"
  fi
  if [ -n "$rust_bin" ]; then
    check "rust-$format" "$format" "$rust_bin"
  fi
done

summary
[ "$failed" -eq 0 ]
