#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian/Ubuntu machine: the OpenCL ICD
# loader and headers, PoCL (the CPU OpenCL device, used when no GPU driver is
# present), a linker for PoCL's kernel compiler, and PostgreSQL's server binaries
# (the PostgreSQL tests start a throw-away cluster with them; the service itself
# needs no local PostgreSQL). Idempotent: does nothing when everything is there.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

need=()
[[ -e /usr/lib/x86_64-linux-gnu/libOpenCL.so || -e /usr/lib/aarch64-linux-gnu/libOpenCL.so || -n "$(ldconfig -p 2>/dev/null | grep -F 'libOpenCL.so ')" ]] || need+=(ocl-icd-opencl-dev)
ldconfig -p 2>/dev/null | grep -q 'libOpenCL.so.1' || need+=(ocl-icd-libopencl1)
ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 || need+=(pocl-opencl-icd)
command -v clinfo >/dev/null 2>&1 || need+=(clinfo)
command -v ld >/dev/null 2>&1 || need+=(binutils)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)

if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi

# PoCL keeps compiled kernels here; a writable cache makes the second run fast.
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pocl}"
mkdir -p "$POCL_CACHE_DIR"
echo "setup: OpenCL devices:" >&2
clinfo -l >&2 || echo "setup: clinfo could not list OpenCL platforms" >&2
