/**
 * `npm run train -- --pad-vocab 64` in subprocesses: the run trains with 128 embedding rows for
 * Tiny Shakespeare's 65 characters, resumes from its checkpoint, samples only real characters;
 * a GPT-2 file imports into a padded run (zero rows appended) and exports back at 65 rows; bad
 * values are one clear line.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { gpt2File } from '../util/gpt2_file.ts';
import { decodeSafetensors, encodeSafetensors } from '../../src/util/safetensors.ts';

const TEXT = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));

Deno.test({
  name: 'train --pad-vocab 64: trains, resumes, samples only real tokens; GPT-2 import pads and export crops',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const run = [...TINY_RUN, '--pad-vocab', '64', '--out', `${dir}/run`];
      const a = await runCli('train.ts', [...run, '--steps', '2']);
      equal(a.code, 0, a.stderr);
      equal(JSON.parse(await Deno.readTextFile(`${dir}/run/config.json`)).padVocab, 64);
      const ck = await decodeSafetensors(await Deno.readFile(`${dir}/run/ckpt.safetensors`), 'ckpt');
      equal(ck.tensors.get('transformer.wte.weight')!.shape.join(), '128,16');
      const resume = ['--out', `${dir}/run`, '--resume'];
      const b = await runCli('train.ts', [...resume, '--steps', '3', '--sample-tokens', '40', '--temperature', '50']);
      equal(b.code, 0, b.stderr);
      match(b.stdout, /resuming at step 2/);
      // Temperature 50 flattens the distribution: a padded id would decode outside the text's characters.
      const sample = await Deno.readTextFile(`${dir}/run/sample.txt`);
      ok(sample.length > 0, 'a sample was written');
      const chars = new Set(TEXT);
      ok([...sample].every((c) => chars.has(c)), `sample has only real characters: ${JSON.stringify(sample)}`);
      const changed = await runCli('train.ts', [...resume, '--pad-vocab', '128']);
      match(changed.stderr, /--resume continues the saved config; these flags would change it: --pad-vocab/);

      // GPT-2 import into a padded run, then export back to the file's 65 rows.
      const shape = { nLayer: 1, nEmbd: 16, vocabSize: 65, positions: 32 };
      await Deno.writeFile(`${dir}/g.safetensors`, await encodeSafetensors(gpt2File(shape, 3), { format: 'pt' }));
      const g = await runCli('train.ts', [
        ...TINY_RUN,
        '--steps',
        '1',
        '--pad-vocab',
        '64',
        '--init-from',
        `${dir}/g.safetensors`,
        '--out',
        `${dir}/ft`,
      ]);
      equal(g.code, 0, g.stderr);
      const ft = await decodeSafetensors(await Deno.readFile(`${dir}/ft/ckpt.safetensors`), 'ft');
      const wte = ft.tensors.get('transformer.wte.weight')!;
      equal(wte.shape.join(), '128,16');
      ok(wte.data.subarray(65 * 16).every((v) => v === 0), 'imported padding rows are zero and stay zero');
      const e = await runCli('export.ts', ['--from', `${dir}/ft/ckpt.safetensors`, '--out', `${dir}/back.safetensors`]);
      equal(e.code, 0, e.stderr);
      const back = await decodeSafetensors(await Deno.readFile(`${dir}/back.safetensors`), 'back');
      equal(back.tensors.get('wte.weight')!.shape.join(), '65,16');
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test('train --pad-vocab: 0, negative and non-integer values are one clear line', async () => {
  for (const bad of ['0', '-64', '2.5']) {
    const r = await runCli('train.ts', [...TINY_RUN, '--steps', '1', `--pad-vocab=${bad}`]);
    ok(r.code !== 0, `--pad-vocab ${bad} must fail`);
    match(r.stderr, /--pad-vocab/, `--pad-vocab ${bad}: ${r.stderr}`);
    match(r.stderr, /minimum 1|expects an integer/, r.stderr);
  }
});
