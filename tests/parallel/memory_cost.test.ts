/**
 * Memory per rank (src/perf/memory_cost.ts), the pipeline bubble and plan.ts rankParams against the model's
 * declarations.
 */
import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { zeroMemoryFp32, zeroMemoryMixed } from '../../src/perf/memory_cost.ts';
import { bubbleFraction } from '../../src/parallel/pipeline/pipeline_sim.ts';
import { makePlan, rankParams } from '../../src/parallel/plan/plan.ts';
import { gptParamSpecs } from '../../src/models/gpt.ts';

Deno.test('ZeRO memory per rank: fp32 (4+4+8 bytes) and mixed precision (docs/design.md#memory-per-rank)', () => {
  const psi = 1000, d = 4;
  deepStrictEqual(zeroMemoryFp32(psi, d, 0), { params: 4000, grads: 4000, optimizer: 8000, total: 16000 });
  deepStrictEqual(zeroMemoryFp32(psi, d, 1), { params: 4000, grads: 4000, optimizer: 2000, total: 10000 });
  deepStrictEqual(zeroMemoryFp32(psi, d, 2), { params: 4000, grads: 1000, optimizer: 2000, total: 7000 });
  deepStrictEqual(zeroMemoryFp32(psi, d, 3), { params: 1000, grads: 1000, optimizer: 2000, total: 4000 });
  equal(zeroMemoryFp32(10, 3, 3).params, 16, 'a shard is ⌈Ψ/d⌉ elements');
  for (const k of [8, 12]) {
    equal(zeroMemoryMixed(psi, d, 0, k).total, (4 + k) * psi);
    equal(zeroMemoryMixed(psi, d, 1, k).total, 4 * psi + (k * psi) / d);
    equal(zeroMemoryMixed(psi, d, 2, k).total, 2 * psi + ((2 + k) * psi) / d);
    equal(zeroMemoryMixed(psi, d, 3, k).total, ((4 + k) * psi) / d);
  }
  equal(zeroMemoryMixed(psi, 1, 0).total, 16 * psi);
  throws(() => zeroMemoryFp32(psi, 0, 1), /d ≥ 1/);
});

Deno.test('bubble fraction (p−1)/(v·m+p−1)', () => {
  equal(bubbleFraction(4, 8), 3 / 11);
  equal(bubbleFraction(4, 8, 2), 3 / 19);
  equal(bubbleFraction(1, 5), 0);
  throws(() => bubbleFraction(0, 1), /positive integers/);
});

const TINY = { nLayer: 2, nHead: 2, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };

Deno.test('rankParams: single rank equals gptParamSpecs; TP and PP shards add up', () => {
  const all = gptParamSpecs({ vocabSize: 65, blockSize: 64, nLayer: 2, nHead: 2, nEmbd: 64, bias: true })
    .reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
  equal(rankParams(makePlan(), TINY, 0).dense, all);
  // tp 2 splits every matrix and column-parallel bias; LayerNorms, wpe and row-parallel biases are copies.
  const tp = makePlan({ tp: 2 }), C = 64;
  const replicated = 64 * C + 2 * (4 * C + 2 * C) + 2 * C; // wpe, per-layer LN + row-parallel biases, ln_f
  const padded = all - 65 * C + 66 * C; // vocab padded to 66
  equal(rankParams(tp, TINY, 0).dense + rankParams(tp, TINY, 1).dense, padded + replicated);
  // pp 2: the last stage keeps its own copy of the tied embedding.
  const pp = makePlan({ pp: 2 });
  equal(rankParams(pp, TINY, 0).dense + rankParams(pp, TINY, 1).dense, all + 65 * C);
});
