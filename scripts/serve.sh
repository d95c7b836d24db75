#!/usr/bin/env bash
# Sets everything up and starts the SpMV service with the shipped models on the
# best OpenCL device found (a GPU when its driver is installed, else PoCL's CPU
# device). Extra arguments go to the server, e.g. `--bind 0.0.0.0:9000`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec cargo run --release -p server -- "$@"
