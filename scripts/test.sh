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
cargo test --workspace --release -- --test-threads=2 "$@"

# The Python client's tests start the release server binary (cargo test builds
# the test binaries, and this makes sure of the server itself).
cargo build --release -p server
python3 -c 'import numpy, scipy, requests' 2>/dev/null ||
  python3 -m pip install -q numpy scipy requests
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
# bench/: the benchmark scripts' parts that need no GPU (their figures come
# from runs elsewhere; these check the parsing and joining behind them).
python3 -m pytest -q clients/python/tests bench
