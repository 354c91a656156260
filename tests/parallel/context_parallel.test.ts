/**
 * Context parallelism: zig-zag ring attention and DeepSpeed-Ulysses, first as single attention
 * calls on a cp-rank world against the f64 reference (outputs, gradients, elements sent), then
 * as the context-parallel GPT on 2 ranks (the mesh trainer) against the single-rank Trainer for
 * 10 steps (mesh_harness.ts checkMeshRun: losses within 1e-4 relative, gradients, parameters)
 * with the traffic of every step equal to the formula and to cost.ts's stepTraffic.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { type AttnArgs, type AttnResult, withCpWorld } from './cp_harness.ts';
import { twins } from './single_rank.ts';
import { checkMeshRun, localMeshRun } from './mesh_harness.ts';
import { checkMeshPlan } from '../../src/parallel/mesh/mesh_trainer.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';
import { cpPositions } from '../../src/parallel/context/context_parallel.ts';
import { zigzagPositions } from '../../src/parallel/context/ring_attention.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { chunkOffsets } from '../../src/comm/algorithms.ts';
import { parseConfig } from '../../src/train/config.ts';

Deno.test('zig-zag positions: rank r holds chunks r and 2cp−1−r; every position once; causal work balanced', () => {
  deepStrictEqual([...zigzagPositions(0, 2, 8)], [0, 1, 6, 7]);
  deepStrictEqual([...zigzagPositions(1, 2, 8)], [2, 3, 4, 5]);
  for (const cp of [2, 3, 4]) {
    const all = [...Array(cp).keys()].flatMap((r) => [...zigzagPositions(r, cp, 24)]);
    deepStrictEqual(all.sort((a, b) => a - b), [...Array(24).keys()]);
    // (query, key) pairs a rank's queries attend to causally: Σ (pos + 1), equal on every rank.
    const work = [...Array(cp).keys()].map((r) => [...zigzagPositions(r, cp, 24)].reduce((s, p) => s + p + 1, 0));
    ok(work.every((w) => w === work[0]), `balanced causal work: ${work}`);
  }
  deepStrictEqual([...cpPositions('ulysses', 1, 2, 8)], [4, 5, 6, 7]);
  assertThrows(() => zigzagPositions(0, 4, 12), 'not divisible by 2·cp = 8');
  assertThrows(() => cpPositions('ulysses', 0, 3, 16), 'not divisible by cp 3');
  assertThrows(
    () => checkMeshPlan(makePlan({ cp: 4, cpKind: 'ulysses' }), parseConfig(tinyConfig()), 65, 4),
    'heads 2 not divisible by the Ulysses degree cp 4',
  );
  assertThrows(() => checkMeshPlan(makePlan({ cp: 2 }), parseConfig(tinyConfig({ goldfishK: 4 })), 65, 2), 'goldfishK');
});

/** Reassembles every rank's rows (global positions) of a (B, T/cp, w) result into (B, T, w). */
function assemble(
  res: AttnResult[],
  pick: (r: AttnResult) => Float32Array,
  b: number,
  t: number,
  w: number,
): Float32Array {
  const out = new Float32Array(b * t * w);
  for (const r of res) {
    const tl = r.pos.length, a = pick(r);
    for (let i = 0; i < b; i++) {
      for (const [j, p] of r.pos.entries()) {
        out.set(a.subarray((i * tl + j) * w, (i * tl + j + 1) * w), (i * t + p) * w);
      }
    }
  }
  return out;
}

/** Elements rank r sends in a direct all-to-all of n elements over p ranks: every chunk but its own. */
function allToAllSent(n: number, p: number, r: number): number {
  const o = chunkOffsets(n, p);
  return n - (o[r + 1] - o[r]);
}

Deno.test({
  name: 'cp4 ring (zig-zag, causal and not) and Ulysses attention equal full attention; elements sent = formula',
  ...WORKER_TEST,
  fn: async () => {
    const cp = 4;
    const cases: AttnArgs[] = [
      { kind: 'ring', b: 2, t: 16, c: 8, nh: 2, causal: true, seed: 5 },
      { kind: 'ring', b: 1, t: 24, c: 12, nh: 3, causal: false, seed: 6 },
      { kind: 'ulysses', b: 2, t: 12, c: 16, nh: 4, causal: true, seed: 7 },
    ];
    await withCpWorld(cp, async (w) => {
      for (const a of cases) {
        const what = `${a.kind} causal ${a.causal}`;
        const res = await w.run<AttnResult>('attn', a);
        const qkv = randn(a.b * a.t * 3 * a.c, a.seed), dy = randn(a.b * a.t * a.c, a.seed + 1);
        const ref = attentionForwardRef(qkv, a);
        assertClose(assemble(res, (r) => r.y, a.b, a.t, a.c), ref.y, `${what}: y`);
        assertRelRms(
          assemble(res, (r) => r.dqkv, a.b, a.t, 3 * a.c),
          attentionBackwardRef(qkv, ref.att, dy, a),
          `${what}: dqkv`,
        );
        const n = a.b * (a.t / cp) * a.c; // B·(T/cp)·C
        for (const [r, x] of res.entries()) {
          if (a.kind === 'ring') {
            // K, V (2n) cp−1 times forward; backward K, V cp−1 times and dK, dV cp times.
            deepStrictEqual(x.sentForward, { 'world/attn:p2p/send': 2 * n * (cp - 1) }, `${what} rank ${r} forward`);
            deepStrictEqual(
              x.sentBackward,
              { 'world/attn:p2p/send': 2 * n * (cp - 1) + 2 * n * cp },
              `${what} rank ${r} backward`,
            );
          } else {
            const want = allToAllSent(3 * n, cp, r) + allToAllSent(n, cp, r); // q,k,v + out: (cp−1)/cp·4n
            equal(want, ((cp - 1) / cp) * 4 * n);
            deepStrictEqual(x.sentForward, { 'world/attn/allToAll': want }, `${what} rank ${r} forward`);
            deepStrictEqual(x.sentBackward, { 'world/attn/allToAll': want }, `${what} rank ${r} backward`);
          }
        }
      }
    });
  },
});

Deno.test({
  name:
    'cp2 ring (zig-zag; also over 2 micro-batches) and cp2 Ulysses GPT match the single-rank run for 10 steps; traffic = formula and cost.ts',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig(), twin = twins(gpu, TEXT);
    for (
      const p of [{ cp: 2, cpKind: 'ring' }, { cp: 2, cpKind: 'ring', microBatches: 2 }, {
        cp: 2,
        cpKind: 'ulysses',
      }] as const
    ) {
      const plan = makePlan(p), what = `cp2 ${plan.cpKind} m ${plan.microBatches}`;
      // mesh_harness.ts expectedMeshSent: per layer and micro-batch, ring 2n(cp−1) K,V forward, 2n(cp−1)
      // K,V + 2n·cp dK,dV backward; Ulysses (cp−1)/cp of 3n and n each way; the dp·cp gradient average.
      checkMeshRun(what, plan, over, await localMeshRun(gpu, plan, over, TEXT), await twin(plan, over));
    }
  },
});
