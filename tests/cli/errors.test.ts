import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';

const SMALL = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '8',
  '--batch-size',
  '2',
  '--steps',
  '2',
  '--sample-tokens',
  '0',
];

function oneLineError(r: { code: number; stderr: string }, pattern: RegExp): void {
  equal(r.code, 1, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
  equal(lines.length, 1, `one error line, got: ${r.stderr}`);
  match(lines[0], pattern);
}

Deno.test({
  name: 'train CLI: unknown flag, impossible config, missing and empty data are one-line errors',
  sanitizeResources: false,
  fn: async () => {
    oneLineError(await runCli('train.ts', ['--bogus']), /error: Unknown option '--bogus'/);
    oneLineError(
      await runCli('train.ts', ['--n-embd', '30', '--n-head', '4']),
      /nEmbd \(30\) must be divisible by nHead \(4\)/,
    );
    oneLineError(
      await runCli('train.ts', ['--data', '/nonexistent/x.txt']),
      /Data file '\/nonexistent\/x.txt' not found/,
    );
    const empty = await Deno.makeTempFile({ suffix: '.txt' });
    oneLineError(await runCli('train.ts', ['--data', empty]), /is empty/);
    const short = await Deno.makeTempFile({ suffix: '.txt' });
    await Deno.writeTextFile(short, 'to be or not');
    oneLineError(await runCli('train.ts', ['--data', short]), /has 12 tokens: too short for block size 64/);
    oneLineError(await runCli('train.ts', ['--resume']), /--resume needs --out DIR/);
  },
});

Deno.test({
  name: 'train CLI: a corrupt checkpoint is refused and left untouched',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const garbage = new TextEncoder().encode('not a checkpoint at all, just text that is long enough');
    await Deno.writeFile(`${dir}/ckpt.safetensors`, garbage);
    oneLineError(
      await runCli('train.ts', ['--out', dir, '--resume']),
      /Corrupt checkpoint .*ckpt.safetensors: header length/,
    );
    deepStrictEqual(await Deno.readFile(`${dir}/ckpt.safetensors`), garbage);
    // Starting a fresh run over it is refused too, so it cannot be overwritten by mistake.
    oneLineError(await runCli('train.ts', ['--out', dir, ...SMALL]), /already holds a checkpoint/);
    deepStrictEqual(await Deno.readFile(`${dir}/ckpt.safetensors`), garbage);
    const entries = [...Deno.readDirSync(dir)].map((e) => e.name);
    ok(!entries.some((n) => n.endsWith('.tmp')), `no temp files left: ${entries}`);
  },
});

Deno.test({
  name: 'train CLI: no adapter names the driver package to install',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('train.ts', ['--gpu=dawn', ...SMALL], { VK_ICD_FILENAMES: '/nonexistent/icd.json' });
    oneLineError(r, /No WebGPU adapter on backend 'dawn'\. .*install Debian's 'chromium'/);
  },
});
