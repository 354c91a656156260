/**
 * `npm run bench -- sample` (src/bench/sample.ts): for every architecture with a decoding cache
 * the two sampling paths draw the same tokens in every round, and the figures are finite and
 * positive; an architecture without a cache and a prompt past the context are refused by name.
 * No speed is asserted here: the ratio is the benchmark's to print.
 */
import { equal, ok, rejects } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { benchSample } from '../../src/bench/sample.ts';
import { KV_CACHE_ARCHS } from '../../src/models/decode.ts';

gpuTest('bench sample: every cached architecture draws the recompute path tokens; finite figures', async (gpu) => {
  const rows = await benchSample(gpu, { nEmbd: 16, blockSize: 16, prompt: 3, tokens: 5, rounds: 1 });
  equal(rows.map((r) => r.arch).join(), KV_CACHE_ARCHS.join());
  for (const r of rows) {
    ok(r.sameTokens, `${r.arch}: the cached and recomputed samples differ`);
    for (const x of [r.cachedTokensPerSec, r.recomputeTokensPerSec, r.speedup]) {
      ok(Number.isFinite(x) && x > 0, `${r.arch}: ${x}`);
    }
    ok(r.params > 0);
  }
});

gpuTest('bench sample: refuses an architecture without a cache and a prompt past the context', async (gpu) => {
  await rejects(benchSample(gpu, { archs: ['gpt', 'nope'] }), /no decoding cache for nope; allowed: gpt,/);
  await rejects(benchSample(gpu, { blockSize: 16, prompt: 10, tokens: 7 }), /prompt \+ tokens ≤ blockSize \(16\)/);
});
