#!/usr/bin/env bash
# What `npm test` needs beyond npm packages, set up idempotently: Deno and the npm packages
# (npm ci when node_modules is missing), Mesa's lavapipe (WebGPU for Deno on a machine without
# a GPU), Debian's Chromium (Dawn's SwiftShader ICD and the browser tests) and MPICH (the MPI
# transport: mpirun and libmpich, loaded through Deno FFI). Installs the
# system packages with apt-get as root or through passwordless sudo; otherwise stops at once
# with the one command to run. Quiet when everything is present, so it costs nothing per run.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x node_modules/.bin/deno ]]; then
  echo "setup: installing npm packages (npm ci)"
  npm ci --no-audit --no-fund
fi

# CHROMIUM names another browser binary (playwright.config.ts); then Debian's is not needed.
want=(mesa-vulkan-drivers mpich libmpich-dev)
[[ -n "${CHROMIUM:-}" ]] || want+=(chromium)

if ! command -v dpkg >/dev/null 2>&1; then
  # Not Debian/Ubuntu: check for the binaries themselves and say what is missing.
  if [[ -z "${CHROMIUM:-}" && ! -x /usr/bin/chromium ]]; then
    echo "error: the browser tests need Chromium at /usr/bin/chromium (or CHROMIUM=/path/to/chrome) and a Vulkan driver (Mesa lavapipe on a machine without a GPU)" >&2
    exit 1
  fi
  exit 0
fi

missing=()
for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "error: the tests need the Debian packages ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
