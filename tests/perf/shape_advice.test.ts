/** Shape advice: a known-bad shape gets advice naming the fix, with a gain from the device's rate curve; a good one gets none. */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';
import { adviseShape } from '../../src/perf/shape_advice.ts';

const dev = DEVICE_PROFILES['h100-sxm'],
  o = { dtype: 'bf16' as const, recompute: 'none' as const, attention: 'flash' as const };

Deno.test('advise: vocab 50257 with tp 2 and head size 80 name the padded vocabulary and 64/128-wide heads, each with a gain', () => {
  const model = { nLayer: 24, nHead: 32, nEmbd: 2560, blockSize: 2048, vocabSize: 50257, batchSize: 1 };
  const found = adviseShape(model, 2, 1, dev, o);
  deepStrictEqual(found.map((a) => a.what).sort(), ['head size', 'vocabulary']);
  const vocab = found.find((a) => a.what === 'vocabulary')!, heads = found.find((a) => a.what === 'head size')!;
  match(vocab.fix, /pad the vocabulary to 50432/);
  equal(vocab.fixed.vocabSize % (dev.gemm.tile * 2), 0);
  match(heads.problem, /head size 2560\/32 = 80 is not a multiple of 64/);
  match(heads.fix, /head size 128 \(20 heads\)/);
  match(heads.fix, /head size 64 \(40 heads\)/);
  for (const a of found) ok(a.gain !== undefined && a.gain > 0, `${a.what}: the fix is predicted faster (${a.gain})`);
  // The advice follows the fixed model: advising it again finds nothing for that dimension.
  const again = adviseShape({ ...heads.fixed, vocabSize: vocab.fixed.vocabSize }, 2, 1, dev, o);
  deepStrictEqual(again, []);
});

Deno.test('advise: heads and width that tp cannot split are named without a gain (the shape cannot run)', () => {
  const model = { nLayer: 4, nHead: 30, nEmbd: 2500, blockSize: 2048, vocabSize: 51200, batchSize: 1 };
  const found = adviseShape(model, 4, 1, dev, o);
  const heads = found.find((a) => a.what === 'heads')!;
  match(heads.problem, /heads 30 are not divisible by tp 4/);
  equal(heads.gain, undefined);
  match(found.find((a) => a.what === 'hidden')!.fix, /hidden 2048 or 2560 \(a multiple of tile × tp = 512\)/);
});

Deno.test('advise: a micro-batch whose rows leave a tile partly empty is named', () => {
  const model = { nLayer: 4, nHead: 16, nEmbd: 2048, blockSize: 100, vocabSize: 51200, batchSize: 1 };
  const found = adviseShape(model, 1, 1, dev, o);
  const mb = found.find((a) => a.what === 'micro-batch')!;
  match(mb.fix, /micro-batch 32 \(a multiple of 32\)/);
  ok(mb.gain! > 0);
});
