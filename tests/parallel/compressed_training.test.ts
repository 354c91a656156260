/**
 * Training under a compression policy (docs/design.md#compressed-collectives-and-the-per-dimension-policy), run as the
 * CLI runs ranks (run.ts trainRank over an in-thread world): every rank's trace equals the compressed prediction
 * (compressed_rows.ts) key by key and step by step; light schemes stay within 2% of the uncompressed run's losses while
 * sending fewer words per compressed dimension; an explicit `none` policy is the uncompressed run bit for bit; under
 * ZeRO the gradient reduce-scatters are compressed (the parameter gathers stay exact); PowerSGD with ZeRO is refused.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { checkPlan, makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { parseCompressPolicy } from '../../src/comm/compression.ts';
import { planFromOptions } from '../../src/parallel/plan/plan_schema.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { TEST, tracedRun, traceMismatches } from './trace_harness.ts';

/** `plan` with and without `compress`: both traces exact; returns both runs. */
async function compare(plan: Partial<ParallelPlan>, compress: string, over: Partial<TrainConfig> = {}) {
  const plain = await tracedRun(makePlan(plan), over);
  const packed = await tracedRun(makePlan({ ...plan, compress: parseCompressPolicy(compress) }), over);
  deepStrictEqual(traceMismatches(packed.ranks, packed.trace), [], `${compress}: trace = compressed prediction`);
  return { plain, packed };
}

/** Words rank 0 sent in its last step in dimension `dim`. */
const wordsOf = (r: Awaited<ReturnType<typeof tracedRun>>, dim: string) =>
  Object.entries(r.ranks[0].records.at(-1)!.byDim).filter(([k]) => k.startsWith(`${dim}/`)).reduce(
    (a, [, v]) => a + v,
    0,
  );

Deno.test({
  name: 'dp2×tp2×pp2 with dp=int8, tp=bf16, pp=int8: exact compressed trace, fewer words, losses within 2%',
  ...TEST,
  fn: async () => {
    const plan = { dp: 2, tp: 2, pp: 2, microBatches: 2 };
    const { plain, packed } = await compare(plan, 'dp=int8:64,tp=bf16,pp=int8:64', { steps: 3 });
    for (const dim of ['dp', 'tp', 'pp']) {
      ok(
        wordsOf(packed, dim) < 0.6 * wordsOf(plain, dim),
        `${dim}: ${wordsOf(packed, dim)} vs ${wordsOf(plain, dim)} words`,
      );
    }
    packed.ranks[0].records.forEach((r, i) => {
      const want = plain.ranks[0].records[i].loss;
      ok(Math.abs(r.loss - want) <= 0.02 * want, `step ${i}: loss ${r.loss} vs uncompressed ${want}`);
    });
    const none = await tracedRun(makePlan({ ...plan, compress: parseCompressPolicy('none') }), { steps: 3 });
    deepStrictEqual(
      none.ranks.map((r) => r.records.map((x) => [x.loss, x.gradNorm, x.byDim])),
      plain.ranks.map((r) => r.records.map((x) => [x.loss, x.gradNorm, x.byDim])),
      'an explicit none policy is the uncompressed run',
    );
  },
});

Deno.test({
  name: 'dp2 PowerSGD rank 2 and cp2 ring with cp=bf16, dp=sign: exact traces, dp words shrink, loss finite',
  ...TEST,
  fn: async () => {
    const p = await compare({ dp: 2 }, 'dp=powersgd:2', { steps: 3 });
    ok(wordsOf(p.packed, 'dp') < 0.5 * wordsOf(p.plain, 'dp'), 'PowerSGD sends P and Q, not the gradient');
    ok(p.packed.ranks[0].records.every((r) => Number.isFinite(r.loss)), 'finite losses');
    equal(
      p.packed.ranks[0].records[0].loss,
      p.plain.ranks[0].records[0].loss,
      'step 0 runs before any compressed update',
    );
    const c = await compare({ dp: 2, cp: 2 }, 'cp=bf16,dp=sign');
    ok(wordsOf(c.packed, 'cp') < 0.6 * wordsOf(c.plain, 'cp'), 'ring attention K,V blocks in bf16');
  },
});

Deno.test({
  name: 'gpt-moe dp2×ep2 with ep=bf16, dp=topk: exact trace; the expert all-to-alls move half the words',
  ...TEST,
  fn: async () => {
    const { plain, packed } = await compare({ dp: 2, ep: 2 }, 'ep=bf16,dp=topk:0.1', { arch: 'gpt-moe', nExpert: 2 });
    equal(wordsOf(packed, 'ep') * 2, wordsOf(plain, 'ep'), 'bf16 halves the dispatch and combine');
  },
});

Deno.test({
  name:
    'ZeRO-1 int8, ZeRO-2 top-k and ZeRO-3 bf16 over dp 2, ZeRO-2 int8 over gpt-moe dp4×ep2: compressed reduce-scatters, exact traces, losses within 2%',
  ...TEST,
  fn: async () => {
    // The MoE plan's expert units are reduce-scattered over their expert-data-parallel group, compressed too.
    const moe = { plan: { dp: 4, ep: 2 }, over: { arch: 'gpt-moe', nExpert: 2 } as Partial<TrainConfig> };
    const cases = [[1, 'dp=int8:64'], [2, 'dp=topk:0.1'], [3, 'dp=bf16'], [2, 'dp=int8:64', moe]] as const;
    for (const [zero, scheme, extra] of cases) {
      const { plain, packed } = await compare({ dp: 2, ...extra?.plan, zero }, scheme, { steps: 3, ...extra?.over });
      ok(wordsOf(packed, 'dp') < wordsOf(plain, 'dp'), `ZeRO-${zero} ${scheme}: fewer dp words`);
      packed.ranks[0].records.forEach((r, i) => {
        const want = plain.ranks[0].records[i].loss;
        ok(Math.abs(r.loss - want) <= 0.02 * want, `ZeRO-${zero} step ${i}: loss ${r.loss} vs ${want}`);
      });
    }
  },
});

Deno.test('PowerSGD with ZeRO and unknown policies are refused with the rule', () => {
  const model = { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4, vocabSize: 65 };
  throws(
    () => checkPlan(makePlan({ dp: 2, zero: 1, compress: parseCompressPolicy('dp=powersgd:2') }), model, 2),
    /--compress dp=powersgd needs zero 0: .* use an elementwise scheme/,
  );
  throws(
    () => planFromOptions({ dp: 2, compress: 'tp=powersgd:2' }, { gradAccum: 1 }, 64),
    /PowerSGD compresses dp gradient matrices only/,
  );
  throws(() => planFromOptions({ dp: 2, compress: 'dq=int8' }, { gradAccum: 1 }, 64), /unknown dimension 'dq'/);
});
