/**
 * Pipeline parallelism on 2 simulated ranks (module workers, each with its own device)
 * against the single-rank Trainer on the same global batch (gradAccum 1): GPipe and 1F1B with
 * m = 2 and 4 micro-batches, interleaved 1F1B (v = 2) on a 4-layer model. Losses within 1e-4
 * relative for 10 steps, step-0 gradients gathered from both stages within RMS 5e-3, parameters
 * after 10 steps within 1e-4 + 1e-3·|ref|, the elements sent per step equal to the formula of
 * pipeline.ts exactly, and the measured 1F1B timeline shows its bubbles.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, ringAllReduceSent, TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { gather, type PpReference, type PpResult, referenceByName, withPpWorld } from './pp_harness.ts';
import { checkPipeline, type PipelineOptions } from '../../src/parallel/pipeline.ts';
import { ModelStages } from '../../src/parallel/stages.ts';
import { RankContext } from '../../src/parallel/rank_context.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';

const WTE = 'transformer.wte.weight';
import type { Span } from '../../src/parallel/pipeline_sim.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, rankParams } from '../../src/parallel/plan.ts';
import { stepTraffic } from '../../src/parallel/cost.ts';

/**
 * Elements pp rank r sends per step: b·T·C per micro-batch for each own stage with a next stage
 * (activations) and each with a previous one (gradients), i.e. 2·m·b·T·C per stage boundary;
 * the ring allReduce of wte's gradient (V·C) between first and last rank; the ring allReduce of
 * [squared grad norm, loss] (2 elements) over the pp group.
 */
function expectedSent(cfg: TrainConfig, o: PipelineOptions, V: number, r: number, P: number): Record<string, number> {
  const m = o.microBatches, v = o.schedule === 'interleaved' ? o.virtualStages ?? 2 : 1, S = P * v;
  const act = (cfg.batchSize / m) * cfg.blockSize * cfg.nEmbd;
  const stages = [...Array(v).keys()].map((c) => c * P + r);
  // Hand-offs between two stages of one rank (p = 1) send nothing.
  const remote = (s: number) => s >= 0 && s < S && s % P !== r;
  const p2p = m * act * (stages.filter((s) => remote(s + 1)).length + stages.filter((s) => remote(s - 1)).length);
  const out: Record<string, number> = {};
  if (p2p) out['world/pp:p2p/send'] = p2p;
  if (P > 1 && (r === 0 || r === P - 1)) out['world/embedding/allReduce'] = ringAllReduceSent(V * cfg.nEmbd, 2, r === 0 ? 0 : 1);
  if (P > 1) out['world/scalars/allReduce'] = ringAllReduceSent(2, P, r);
  if (P === 1) return out;
  // cost.ts's analytical pp rows (p2p + tied-embedding allReduce) agree; the 2 scalars are this trainer's own.
  const plan = makePlan({ pp: P, schedule: o.schedule, microBatches: m, virtualStages: v });
  const rows = stepTraffic(plan, { ...cfg, vocabSize: V }, r).filter((x) => x.dim === 'pp');
  equal(rows.reduce((a, x) => a + x.elements, 0), p2p + (out['world/embedding/allReduce'] ?? 0), `cost.ts pp traffic of rank ${r}`);
  return out;
}

function checkRun(what: string, res: PpResult[], ref: PpReference, cfg: TrainConfig, o: PipelineOptions): void {
  const P = res.length;
  for (const [r, x] of res.entries()) {
    ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
    ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `${what} rank ${r}: grad norms ${x.gradNorms} vs ${ref.gradNorms}`);
    const want = expectedSent(cfg, o, ref.vocabSize, r, P);
    for (const [s, sent] of x.sent.entries()) deepStrictEqual(sent, want, `${what} rank ${r} step ${s}: elements sent`);
  }
  // Every parameter lives on exactly one rank, except wte, which both ends hold.
  for (const n of ref.names) equal(res.filter((x) => n in x.grads0).length, n === WTE && P > 1 ? 2 : 1, `${what}: holders of ${n}`);
  assertRelRms(gather(ref.names, res.map((x) => x.grads0)), gather(ref.names, [ref.grads0]), `${what}: step-0 gradients`);
  assertClose(gather(ref.names, res.map((x) => x.params)), gather(ref.names, [ref.params]), `${what}: parameters after 10 steps`);
  // The embedding group keeps the two wte copies identical (same summed gradient, same update).
  deepStrictEqual(res[0].params[WTE], res[P - 1].params[WTE], `${what}: wte copies diverged`);
  deepStrictEqual(res[0].grads0[WTE], res[P - 1].grads0[WTE], `${what}: wte gradients differ between the ends`);
}

/** The measured 1F1B (p 2, m 4) timeline of one step: bubbles where the schedule has them. */
function checkBubbles(step: number, [t0, t1]: PpResult[]): void {
  const spans = (x: PpResult) => x.timelines[step];
  // Absolute wall times, so the two ranks' clocks line up.
  const at = (x: PpResult, label: string) => {
    const s = spans(x).find((s) => s.label === label);
    ok(s, `step ${step}: no span '${label}' in ${spans(x).map((s) => s.label)}`);
    return { start: s.start + origin(x), end: s.end + origin(x) };
  };
  const origin = (x: PpResult) => x.origins[step];
  for (const x of [t0, t1]) {
    const l = spans(x);
    for (let i = 1; i < l.length; i++) ok(l[i].start >= l[i - 1].end - 1e-6, `step ${step}: spans overlap at ${l[i].label}`);
  }
  // Stage 1 starts idle: it waits for micro-batch 0's activation, which stage 0 computes first.
  const first: Span = spans(t1)[0];
  ok(first.kind === 'idle' && first.label === 'wait ra0@1' && first.end > first.start, `stage 1 starts waiting: ${JSON.stringify(first)}`);
  ok(at(t1, 'F0@1').start >= at(t0, 'F0@0').end - 1, 'stage 1 runs F0 only after stage 0 finished it');
  // Stage 0 ends idle: after its last forward it waits for the gradient of micro 3, which needs stage 1's F3 and B3.
  const lastF = spans(t0).findIndex((s) => s.label === 'F3@0');
  const idleAfter = spans(t0).slice(lastF).filter((s) => s.kind === 'idle');
  ok(idleAfter.some((s) => s.label === 'wait rg3@0' && s.end > s.start), `stage 0 idles after F3: ${idleAfter.map((s) => s.label)}`);
  ok(at(t0, 'wait rg3@0').end >= at(t1, 'B3@1').end - 1, 'stage 0 receives the last gradient only after stage 1 computed it');
  ok(at(t0, 'B3@0').start >= at(t1, 'B3@1').end - 1, 'stage 0 runs B3 after stage 1');
}

Deno.test({
  name: 'pp2 GPipe / 1F1B (m 2, 4), interleaved 1F1B (pp2 and pp1 × v2) match the single-rank run; traffic is exact; 1F1B bubbles are measured',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const cfg2 = tinyConfig(), cfg4 = tinyConfig({ nLayer: 4 });
    const ref2 = await referenceByName(gpu, cfg2), ref4 = await referenceByName(gpu, cfg4);
    ok(ref2.gradNorms.some((n) => n > 0.5), `clipping must be active on some step: norms ${ref2.gradNorms}`);
    const runs: [Partial<TrainConfig>, PpReference, PipelineOptions][] = [
      [cfg2, ref2, { schedule: 'gpipe', microBatches: 2 }],
      [cfg2, ref2, { schedule: 'gpipe', microBatches: 4 }],
      [cfg2, ref2, { schedule: '1f1b', microBatches: 2 }],
      [cfg2, ref2, { schedule: '1f1b', microBatches: 4 }],
      [cfg4, ref4, { schedule: '1f1b', microBatches: 2 }],
      [cfg4, ref4, { schedule: 'interleaved', microBatches: 2, virtualStages: 2 }],
    ];
    await withPpWorld(2, async (w) => {
      for (const [over, ref, opts] of runs) {
        const what = `pp2 ${opts.schedule} m ${opts.microBatches} (${over.nLayer} layers)`;
        const res = await w.run<PpResult>('train', { cfg: over, text: TEXT, opts });
        checkRun(what, res, ref, parseConfig(over), opts);
        if (opts.schedule === '1f1b' && opts.microBatches === 4 && over.nLayer === 2) {
          for (let s = 1; s < res[0].timelines.length; s++) checkBubbles(s, res);
        }
      }
    });
    // A plan whose layers do not split over the ranks is refused on every rank, before any device or message.
    let msg = '';
    // One rank, two chunks: the stage-to-stage hand-offs stay on the rank (GPU copies, no messages).
    await withPpWorld(1, async (w) => {
      const opts: PipelineOptions = { schedule: 'interleaved', microBatches: 2, virtualStages: 2 };
      checkRun('pp1 interleaved v 2 m 2', await w.run<PpResult>('train', { cfg: cfg2, text: TEXT, opts }), ref2, parseConfig(cfg2), opts);
    });
    await withPpWorld(2, (w) => w.run('train', { cfg: tinyConfig({ nLayer: 3 }), text: TEXT, opts: { schedule: '1f1b', microBatches: 2 } })).catch((e) => (msg = String(e)));
    ok(/rank \d: pipeline: nLayer \(3\) must be divisible by pp·v \(2·1 = 2\)/.test(msg), msg);
  },
});

Deno.test({
  name: 'pipeline plans: bad splits and batch sizes are refused with the rule they break',
  ...WORKER_TEST,
  fn: async () => {
    const cfg = (over: Partial<TrainConfig>) => parseConfig(tinyConfig(over));
    throws(() => checkPipeline(cfg({ nLayer: 3 }), 2, { schedule: 'gpipe', microBatches: 2 }), /nLayer \(3\) must be divisible by pp·v \(2·1 = 2\)/);
    throws(() => checkPipeline(cfg({ nLayer: 2 }), 2, { schedule: 'interleaved', microBatches: 2, virtualStages: 2 }), /nLayer \(2\) must be divisible by pp·v \(2·2 = 4\)/);
    throws(() => checkPipeline(cfg({}), 2, { schedule: '1f1b', microBatches: 3 }), /microBatches \(3\) must be a positive integer dividing batchSize \(4\)/);
    throws(() => checkPipeline(cfg({ gradAccum: 2 }), 2, { schedule: '1f1b', microBatches: 2 }), /gradAccum must be 1/);
    throws(() => checkPipeline(cfg({ nLayer: 4, batchSize: 6 }), 2, { schedule: 'interleaved', microBatches: 3, virtualStages: 2 }), /micro-batches 3 must be a multiple of pp 2/);
    equal(checkPipeline(cfg({}), 2, { schedule: '1f1b', microBatches: 4 }).ranks.length, 2);
    const gpu = await testGpu();
    const gcfg = { vocabSize: 65, blockSize: 16, nLayer: 3, nHead: 2, nEmbd: 32, bias: true };
    const [self] = localWorld(1), ctx = new RankContext({ tp: self, vocabSize: 65 });
    const stages = (nLayer: number, r: number) => new ModelStages(gpu, cfg({ nLayer, blockSize: 16, nHead: 2, nEmbd: 32 }), 65, ctx, { ppRank: r, pp: 2, v: 1 });
    throws(() => stages(3, 0), /nLayer \(3\) must be divisible by pp·v/);
    // The stage split: stage 0 embeds, the last stage holds ln_f and a copy of wte (last in its store).
    const names = (r: number) => {
      const st = stages(4, r);
      st.params.destroy();
      const plan = makePlan({ pp: 2 }), model = { ...gcfg, nLayer: 4, batchSize: 4 };
      equal(st.params.count, rankParams(plan, model, r).dense, `rank ${r}: parameter count vs plan.ts rankParams`);
      return st.params.params.map((p) => p.name);
    };
    const [a, b] = [names(0), names(1)];
    closeLocalWorld([self]);
    ok(a[0] === WTE && a.includes('transformer.wpe.weight') && a.some((n) => n.startsWith('transformer.h.1.')) && !a.some((n) => n.startsWith('transformer.h.2.')), `${a}`);
    ok(b.at(-1) === WTE && b.includes('transformer.ln_f.weight') && b.some((n) => n.startsWith('transformer.h.3.')) && !b.includes('transformer.wpe.weight'), `${b}`);
  },
});
