#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (release profile: the tests
# drive real OpenCL kernels and real matrices, which debug builds make slow).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [[ -d ../shared/matrices ]]; then
  echo "test: ../shared found: the tests over the whole shared corpus run" >&2
else
  echo "test: ../shared not found: corpus-wide tests use the bundled fixtures and say so" >&2
fi
if [[ -n "${SPMV_TEST_POSTGRES_URL:-}" ]]; then
  echo "test: the PostgreSQL tests use SPMV_TEST_POSTGRES_URL (a database per test)" >&2
else
  echo "test: the PostgreSQL tests start a throw-away server (postgresql from setup.sh)" >&2
fi
# One integration-test binary per crate (tests/main.rs), so the build links a
# few binaries rather than one per test file.
cargo test --workspace --release -- --test-threads=2 "$@"

# The Python client's tests start the release server binary. The serve command
# builds it with `cargo build -p server`, whose dependency features must equal
# the test build's (crates/feature-union): then nothing is compiled again here,
# and the serve command after this script starts without a rebuild.
build_log=$(mktemp)
cargo build --release -p server 2>&1 | tee "$build_log" >&2
if grep -E '^ *Compiling ' "$build_log" | grep -v -E 'Compiling (server|feature-union) ' >&2; then
  echo "test: FAIL: 'cargo build --release -p server' compiled dependencies again after the tests" >&2
  echo "test: their features differ from the test build's; add them to crates/feature-union/Cargo.toml" >&2
  rm -f "$build_log"
  exit 1
fi
rm -f "$build_log"
python3 -c 'import numpy, scipy, requests' 2>/dev/null ||
  python3 -m pip install -q numpy scipy requests
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
# bench/: the benchmark scripts' parts that need no GPU (their figures come
# from runs elsewhere; these check the parsing and joining behind them).
python3 -m pytest -q clients/python/tests bench
