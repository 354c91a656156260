/**
 * scripts/deno_tests.sh passes `deno test`'s status through, except an abort (SIGABRT) after the
 * final all-passed summary, which it reports and counts as passed. Checked with a stand-in `deno`
 * on PATH that prints a summary and then exits or aborts.
 */
import { equal, match } from 'node:assert/strict';

async function run(summary: string, end: string): Promise<{ code: number; stderr: string }> {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/deno`, `#!/bin/bash\necho "${summary}"\n${end}\n`, { mode: 0o755 });
  const out = await new Deno.Command('bash', {
    args: ['scripts/deno_tests.sh', '-A', 'tests/'],
    env: { PATH: `${dir}:${Deno.env.get('PATH')}` },
    stdout: 'null',
    stderr: 'piped',
  }).output();
  await Deno.remove(dir, { recursive: true });
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test('deno_tests.sh: a teardown abort after every test passed counts as passed, and says so', async () => {
  const r = await run('ok | 3 passed | 0 failed (1s)', 'kill -ABRT $$');
  equal(r.code, 0);
  match(r.stderr, /ok \| 3 passed \| 0 failed .* aborted \(SIGABRT\) in the runtime's exit teardown/);
});

Deno.test('deno_tests.sh: failures, aborts before a passing summary and other exits keep their status', async () => {
  equal((await run('FAILED | 2 passed | 1 failed (1s)', 'kill -ABRT $$')).code, 134);
  equal((await run('running 3 tests', 'kill -ABRT $$')).code, 134);
  equal((await run('ok | 3 passed | 0 failed (1s)', 'exit 1')).code, 1);
  equal((await run('FAILED | 2 passed | 1 failed (1s)', 'exit 1')).code, 1);
  equal((await run('ok | 3 passed | 0 failed (1s)', 'exit 0')).code, 0);
});
