#!/usr/bin/env bash
# `npm test`: the Deno suite and the browser suite at the same time. On a 2-core machine the Deno
# suite alone leaves part of the CPU idle (its files wait on worker ranks, subprocesses and the GPU
# queue), which the browser suite fills: beside it the browser suite took 9.8 min instead of 5.5
# and the Deno suite no longer waits for it (2026-11-29: CI 25.6 min with a cold shader cache,
# against 26.0 min one after the other with a warm one; docs/development.md, "Tests"). The Deno
# suite's output streams; the browser suite's is held in a file and printed after it, so the two
# never interleave. The exit status is the Deno suite's when it failed, else the browser suite's.
# `npm run test:unit` and `npm run test:e2e` run one side alone.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit $?
e2e_log=$(mktemp)
# Its own process group, so that one kill reaches Playwright, Chromium and the preview server.
setsid npx playwright test >"$e2e_log" 2>&1 &
e2e=$!
# Ctrl-C or a failure of this script must not leave the browser suite running.
trap 'kill -- -"$e2e" 2>/dev/null; rm -f "$e2e_log"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash scripts/deno_tests.sh -A --parallel tests/
unit=$?
wait "$e2e"
browser=$?
echo
echo "── browser tests (Playwright, run beside the Deno tests) ──"
cat "$e2e_log"
[ "$unit" -eq 0 ] || exit "$unit"
exit "$browser"
