#!/usr/bin/env bash
# Runs `deno test "$@"`. It passes only when deno exits 0 and the last line it printed is its
# summary "ok | N passed | 0 failed"; any other status (an abort or segfault after the summary
# included), output after the summary, or no summary fails. Native aborts at exit once came from
# libEGL, which Deno's wgpu no longer loads (docs/design.md#runtime-quirks): one now is a defect.
set -uo pipefail
# `--parallel` runs DENO_JOBS test files at once: two per core, at most 8, unless set. A file spends much
# of its time waiting on worker ranks, subprocesses and the GPU queue, so one per core left the CPU idle
# (fresh-clone CI on 2 cores, 2026-11-29: 20.6 min at one per core, 18.1 min at two; docs/development.md).
# On Dawn (GPU=dawn) one per core: SwiftShader's compiles keep every core busy, and at two per core on 2
# cores the parallel tests' collectives timed out waiting for ranks still compiling.
per_core=2
[ "${GPU:-}" = dawn ] && per_core=1
jobs=$(( $(nproc) * per_core ))
export DENO_JOBS="${DENO_JOBS:-$(( jobs > 8 ? 8 : jobs ))}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
deno test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -v '^[[:space:]]*$')
# Tests with steps (t.step) add their count: 'ok | 960 passed (46 steps) | 0 failed | 27 ignored (20m30s)'.
summary='^ok \| [0-9]+ passed( \([0-9]+ steps?\))? \| 0 failed( |$)'
[ "$rc" -eq 0 ] || exit "$rc"
last=$(tail -1 <<<"$plain")
if ! grep -qE "$summary" <<<"$last"; then
  echo "deno test exited 0 but its last line is not the 'ok | N passed | 0 failed' summary: '${last}'" >&2
  exit 1
fi
