/**
 * Context parallelism: zig-zag ring attention and DeepSpeed-Ulysses, first as single attention
 * calls on a cp-rank world against the f64 reference (outputs, gradients, elements sent), then
 * as the context-parallel GPT on 2 ranks against the single-rank Trainer for 10 steps (losses
 * within 1e-4 relative, step-0 gradients within RMS 5e-3) with the traffic of every step equal
 * to the stated formula and to cost.ts's stepTraffic for the cp trainer.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { maxRel, reference, ringAllReduceSent, TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { type AttnArgs, type AttnResult, type CpRunResult, withCpWorld } from './cp_harness.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';
import { checkContextParallel, cpPositions } from '../../src/parallel/context_parallel.ts';
import { zigzagPositions } from '../../src/parallel/ring_attention.ts';
import { DEFAULT_PLAN } from '../../src/parallel/plan.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost.ts';
import { chunkOffsets } from '../../src/comm/algorithms.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';

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
  assertThrows(() => checkContextParallel(parseConfig(tinyConfig()), 4, 'ulysses'), 'heads 2 not divisible by cp 4');
  assertThrows(() => checkContextParallel(parseConfig(tinyConfig({ goldfishK: 4 })), 2, 'ring'), 'goldfishK');
});

/** Reassembles every rank's rows (global positions) of a (B, T/cp, w) result into (B, T, w). */
function assemble(res: AttnResult[], pick: (r: AttnResult) => Float32Array, b: number, t: number, w: number): Float32Array {
  const out = new Float32Array(b * t * w);
  for (const r of res) {
    const tl = r.pos.length, a = pick(r);
    for (let i = 0; i < b; i++) for (const [j, p] of r.pos.entries()) out.set(a.subarray((i * tl + j) * w, (i * tl + j + 1) * w), (i * t + p) * w);
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
        assertRelRms(assemble(res, (r) => r.dqkv, a.b, a.t, 3 * a.c), attentionBackwardRef(qkv, ref.att, dy, a), `${what}: dqkv`);
        const n = a.b * (a.t / cp) * a.c; // B·(T/cp)·C
        for (const [r, x] of res.entries()) {
          if (a.kind === 'ring') {
            // K, V (2n) cp−1 times forward; backward K, V cp−1 times and dK, dV cp times.
            deepStrictEqual(x.sentForward, { 'world/attn:p2p/send': 2 * n * (cp - 1) }, `${what} rank ${r} forward`);
            deepStrictEqual(x.sentBackward, { 'world/attn:p2p/send': 2 * n * (cp - 1) + 2 * n * cp }, `${what} rank ${r} backward`);
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
  name: 'cp2 ring (zig-zag; also × gradAccum 2) and cp2 Ulysses GPT match the single-rank run for 10 steps; traffic = formula and cost.ts',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const runs = [{ kind: 'ring', over: tinyConfig() }, { kind: 'ulysses', over: tinyConfig() }, { kind: 'ring', over: tinyConfig({ gradAccum: 2 }) }] as const;
    const refs = [await reference(gpu, runs[0].over), await reference(gpu, runs[2].over)];
    const vocabSize = CharTokenizer.fromText(TEXT).vocabSize;
    await withCpWorld(2, async (w) => {
      for (const [i, { kind, over }] of runs.entries()) {
        const cfg = parseConfig(over), ref = refs[i === 2 ? 1 : 0], m = cfg.gradAccum;
        const cp = 2, L = m * cfg.nLayer, b = cfg.batchSize, s = cfg.blockSize / cp, C = cfg.nEmbd, n = b * s * C;
        const res = await w.run<CpRunResult>('train', { cfg: over, text: TEXT, kind });
        for (const [rank, r] of res.entries()) {
          const what = `cp2 ${kind} gradAccum ${m} rank ${rank}`;
          ok(maxRel(r.losses, ref.losses) < 1e-4, `${what}: losses ${r.losses} vs ${ref.losses}`);
          ok(maxRel(r.gradNorms, ref.gradNorms) < 1e-3, `${what}: grad norms ${r.gradNorms} vs ${ref.gradNorms}`);
          assertRelRms(r.grads0, ref.grads0, `${what}: averaged gradients of step 0`);
          assertClose(r.params, ref.params, `${what}: parameters after 10 steps`);

          // Per step and micro-batch (L counts layers × micro-batches): ring 2n(cp−1) fwd + 2n(cp−1) + 2n·cp bwd per layer; Ulysses (cp−1)/cp·4n each way per layer.
          const attn = kind === 'ring'
            ? { 'world/attn:p2p/send': L * (2 * n * (cp - 1) + 2 * n * (cp - 1) + 2 * n * cp) }
            : { 'world/attn/allToAll': L * 2 * (allToAllSent(3 * n, cp, rank) + allToAllSent(n, cp, rank)) };
          const want = { ...attn, 'world/grads/allReduce': ringAllReduceSent(r.flat, cp, rank), 'world/loss/allReduce': ringAllReduceSent(1, cp, rank) };
          for (const [step, sent] of r.sent.entries()) deepStrictEqual(sent, want, `${what} step ${step}`);

          // cost.ts stepTraffic for the cp trainer predicts all of it exactly: attention on cp
          // (ring: K,V cp−1 hops each pass + dK,dV cp hops; Ulysses: packed q,k,v + output), the
          // gradient and loss sums on dp (the dp·cp group).
          // Not the whole config: its MoE field nExpert would make plan.ts count experts.
          const model = { nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: C, blockSize: cfg.blockSize, batchSize: cfg.batchSize * m, vocabSize };
          const rows = stepTraffic({ ...DEFAULT_PLAN, cp, cpKind: kind, microBatches: m }, model, rank, { buckets: [r.flat], trainer: 'cp' });
          ok(rows.every((x) => x.exact), `${what}: every stepTraffic row exact`);
          const measured: Record<string, number> = {};
          for (const [k, v] of Object.entries(want)) {
            const key = `${k.includes('/attn') ? 'cp' : 'dp'}/${k.split('/').pop()}`;
            measured[key] = (measured[key] ?? 0) + v;
          }
          deepStrictEqual(Object.fromEntries(trafficByKind(rows)), measured, `${what}: stepTraffic = measured, by dim/collective`);
        }
      }
    });
  },
});
