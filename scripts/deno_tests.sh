#!/usr/bin/env bash
# Runs `deno test "$@"` and exits with its status, with one exception, said out loud: when every
# test has passed (deno printed its final "ok | N passed | 0 failed" line) and the process then
# aborted with SIGABRT (exit 134) while tearing down, the run counts as passed. That abort is a
# native heap error ("double free or corruption", "corrupted size vs. prev_size") in the WebGPU
# runtime's exit path on lavapipe, seen about once in six runs of tests/kernels/, after the last
# test; no test result depends on it. Any other failure, or an abort before the summary, fails.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
deno test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^ok \| [0-9]+ passed \| 0 failed' | tail -1)
if [ "$rc" -eq 134 ] && [ -n "$summary" ]; then
  echo "deno test: ${summary} — then the process aborted (SIGABRT) in the runtime's exit teardown;" \
    "counted as passed (scripts/deno_tests.sh says why)" >&2
  exit 0
fi
exit "$rc"
