/**
 * exitProcess (src/cli/exit.ts): the status reaches the parent, everything printed before it
 * arrives whole through a pipe, and `unload` listeners run — with FFI (`_exit`) and without it
 * (the `Deno.exit` path).
 */
import { equal, ok } from 'node:assert/strict';

const EXIT = new URL('../../src/cli/exit.ts', import.meta.url).href;

async function runScript(allow: string[], marker: string): Promise<Deno.CommandOutput> {
  const script = `
    import { exitProcess } from '${EXIT}';
    addEventListener('unload', () => Deno.writeTextFileSync(${JSON.stringify(marker)}, 'unloaded'));
    for (let i = 0; i < 2000; i++) console.log('line ' + i + ' ' + 'x'.repeat(100));
    console.error('last words');
    exitProcess(7);
  `;
  const dir = await Deno.makeTempDir({ prefix: 'exit-test-' });
  const file = `${dir}/main.ts`;
  await Deno.writeTextFile(file, script);
  try {
    return await new Deno.Command(Deno.execPath(), {
      args: ['run', ...allow, file],
      stdout: 'piped',
      stderr: 'piped',
    }).output();
  } finally {
    await Deno.remove(file);
  }
}

for (
  const [label, allow] of [['_exit through FFI', ['-A']], ['Deno.exit without FFI', ['--allow-write', '--allow-read']]]
) {
  Deno.test(`exitProcess (${label}): status 7, 2000 printed lines and stderr arrive whole, unload runs`, async () => {
    const dir = await Deno.makeTempDir({ prefix: 'exit-marker-' });
    const marker = `${dir}/unloaded`;
    const out = await runScript(allow as string[], marker);
    const stdout = new TextDecoder().decode(out.stdout).trimEnd().split('\n');
    equal(out.code, 7, new TextDecoder().decode(out.stderr));
    equal(stdout.length, 2000);
    equal(stdout[1999], 'line 1999 ' + 'x'.repeat(100));
    ok(new TextDecoder().decode(out.stderr).includes('last words'));
    equal(await Deno.readTextFile(marker), 'unloaded');
    await Deno.remove(dir, { recursive: true });
  });
}
