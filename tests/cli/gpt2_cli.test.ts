/**
 * `npm run train -- --init-from FILE` and `npm run export` in subprocesses: a run started from a
 * GPT-2 checkpoint moves each weight by at most one AdamW step from the file's value (so the
 * file was what it trained), its checkpoint exports back to the GPT-2 layout, and misuse is one
 * clear line.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { gpt2File } from '../util/gpt2_file.ts';
import { decodeSafetensors, encodeSafetensors } from '../../src/util/safetensors.ts';

// TINY_RUN's model (1 layer, width 16, block 16) on Tiny Shakespeare's 65 characters.
const SHAPE = { nLayer: 1, nEmbd: 16, vocabSize: 65, positions: 32 };
const LR = 1e-3, WD = 0.1;

Deno.test({
  name: 'train --init-from a GPT-2 file: one step moves each weight by at most one AdamW step; export gives GPT-2 back',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const original = gpt2File(SHAPE, 3);
      await Deno.writeFile(`${dir}/gpt2.safetensors`, await encodeSafetensors(original, { format: 'pt' }));
      const args = [...TINY_RUN, '--steps', '1', '--lr', String(LR), '--min-lr', String(LR), '--warmup', '0'];
      const r = await runCli('train.ts', [...args, '--init-from', `${dir}/gpt2.safetensors`, '--out', `${dir}/run`]);
      equal(r.code, 0, r.stderr);
      match(r.stdout, /init: GPT-2 weights from .*gpt2\.safetensors/);
      const e = await runCli('export.ts', [
        '--from',
        `${dir}/run/ckpt.safetensors`,
        '--out',
        `${dir}/back.safetensors`,
      ]);
      equal(e.code, 0, e.stderr);
      const { tensors, metadata } = await decodeSafetensors(await Deno.readFile(`${dir}/back.safetensors`), 'back');
      equal(metadata.format, 'pt');
      const kept = original.filter((t) => !t.name.endsWith('.attn.bias'));
      equal(tensors.size, kept.length);
      let moved = 0;
      for (const t of kept) {
        const got = tensors.get(t.name === 'wpe.weight' ? t.name : t.name);
        ok(got, `exported ${t.name}`);
        // wpe is cropped to the run's block size (16 of the file's 32 positions).
        const want = t.name === 'wpe.weight' ? t.data.subarray(0, 16 * 16) : t.data;
        equal(got.data.length, want.length, t.name);
        for (let i = 0; i < want.length; i++) {
          const d = Math.abs(got.data[i] - want[i]);
          // AdamW's first step: |Δ| ≤ lr·(1 + wd·|w|) (m̂/√v̂ is ±1 or 0); a random init would be off by ~0.2.
          ok(d <= LR * (1 + WD * Math.abs(want[i])) * 1.001 + 1e-7, `${t.name}[${i}] moved ${d}`);
          if (d > 0) moved++;
        }
      }
      ok(moved > 0, 'the step changed the weights');
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test('train --init-from and export: misuse is one clear line', async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/gpt2.safetensors`, await encodeSafetensors(gpt2File(SHAPE), { format: 'pt' }));
    const cases: [string, string[], RegExp][] = [
      [
        'train.ts',
        ['--init-from', `${dir}/gpt2.safetensors`, '--resume', '--out', `${dir}/r`],
        /--init-from starts a new run/,
      ],
      ['train.ts', ['--init-from', `${dir}/gpt2.safetensors`, '--dp', '2'], /--init-from .* single-rank/],
      [
        'train.ts',
        [...TINY_RUN, '--n-layer', '2', '--init-from', `${dir}/gpt2.safetensors`, '--out', `${dir}/r2`],
        /1 layers \(--n-layer 1, run has 2\)/,
      ],
      ['export.ts', ['--from', `${dir}/gpt2.safetensors`, '--out', `${dir}/x`], /Corrupt checkpoint/],
      ['export.ts', ['--out', `${dir}/x`], /--from CKPT and --out FILE are both required/],
    ];
    for (const [cli, args, want] of cases) {
      const r = await runCli(cli, args);
      ok(r.code !== 0, `${cli} ${args.join(' ')}: non-zero exit`);
      const lines = r.stderr.trim().split('\n').filter((l) => /error|export:|Error/.test(l));
      ok(lines.length >= 1, r.stderr);
      match(r.stderr, want);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
