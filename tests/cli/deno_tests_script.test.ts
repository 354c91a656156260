/**
 * scripts/deno_tests.sh passes a run only when deno's "ok | N passed | 0 failed" summary is the
 * last line it printed and deno exited 0. Output after the summary, no summary, or any non-zero
 * status — an abort or a segfault right after an all-passed summary included — fails. Checked with
 * a stand-in `deno` on PATH that prints lines and then exits or kills itself with a signal.
 */
import { equal, match } from 'node:assert/strict';

async function run(lines: string[], end: string): Promise<{ code: number; stderr: string }> {
  const dir = await Deno.makeTempDir();
  const body = lines.map((l) => `printf '%b\\n' "${l}"`).join('\n');
  await Deno.writeTextFile(`${dir}/deno`, `#!/bin/bash\n${body}\n${end}\n`, { mode: 0o755 });
  const out = await new Deno.Command('bash', {
    args: ['scripts/deno_tests.sh', '-A', 'tests/'],
    env: { PATH: `${dir}:${Deno.env.get('PATH')}` },
    stdout: 'null',
    stderr: 'piped',
  }).output();
  await Deno.remove(dir, { recursive: true });
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

const OK = 'ok | 3 passed | 0 failed (1s)';
const HEAP = 'corrupted size vs. prev_size in fastbins';

Deno.test('deno_tests.sh: a passing run ends with the summary and status 0', async () => {
  equal((await run(['running 3 tests', OK, ''], 'exit 0')).code, 0);
  // Colours, as deno prints them on a terminal, and counts after the summary's start.
  equal((await run(['\\x1b[32mok\\x1b[0m | 3 passed | 0 failed | 2 ignored (1s)'], 'exit 0')).code, 0);
  // A run with test steps counts them beside the tests.
  equal((await run(['ok | 960 passed (46 steps) | 0 failed | 27 ignored (20m30s)'], 'exit 0')).code, 0);
  equal((await run(['FAILED | 959 passed (45 steps) | 1 failed (1 step) (20m)'], 'exit 0')).code, 1);
});

Deno.test('deno_tests.sh: the summary must be the last line, not just somewhere in the output', async () => {
  const after = await run([OK, 'error: something after the summary'], 'exit 0');
  equal(after.code, 1);
  match(after.stderr, /last line is not the 'ok \| N passed \| 0 failed' summary: 'error: something after/);
  equal((await run(['running 3 tests'], 'exit 0')).code, 1, 'no summary at all');
  equal((await run(['FAILED | 2 passed | 1 failed (1s)'], 'exit 0')).code, 1, 'a failing summary');
});

Deno.test("deno_tests.sh: an abort right after the all-passed summary fails, with or without glibc's message", async () => {
  for (const lines of [[OK], [OK, HEAP], [OK, 'double free or corruption (out)'], [OK, 'free(): invalid pointer']]) {
    equal((await run(lines, 'kill -ABRT $$')).code, 134, lines.join(' / '));
  }
});

Deno.test('deno_tests.sh: segfaults, other output before an abort, and failures keep their status', async () => {
  equal((await run([OK], 'kill -SEGV $$')).code, 139);
  equal((await run([OK, 'thread panicked', HEAP], 'kill -ABRT $$')).code, 134, 'output after the summary');
  equal((await run(['running 3 tests', HEAP], 'kill -ABRT $$')).code, 134, 'no summary');
  equal((await run(['FAILED | 2 passed | 1 failed (1s)'], 'kill -ABRT $$')).code, 134);
  equal((await run([OK], 'exit 1')).code, 1);
  equal((await run(['FAILED | 2 passed | 1 failed (1s)'], 'exit 1')).code, 1);
});
