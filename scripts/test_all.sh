#!/usr/bin/env bash
# `npm test`: the Deno suite and the browser suite at the same time, so the browser suite fills
# the CPU the Deno suite's files leave idle while they wait on worker ranks, subprocesses and the
# GPU queue (2026-11-29, fresh-clone CI on 2 cores with a cold shader cache: 17.9 min in all, the
# browser suite done in 6.1 of the Deno suite's 17.7; docs/development.md, "Tests"). The Deno
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
