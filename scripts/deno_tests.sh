#!/usr/bin/env bash
# Runs `deno test "$@"`. It passes only when deno exits 0 and the last line it printed is its
# summary "ok | N passed | 0 failed"; any other status (an abort or segfault after the summary
# included), output after the summary, or no summary fails. Native aborts at exit once came from
# libEGL, which Deno's wgpu no longer loads (docs/design.md#runtime-quirks): one now is a defect.
set -uo pipefail
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
