/**
 * Mesh-trainer test harness: runs of src/parallel/mesh/mesh_trainer.ts whose dp·pp·cp·tp ranks are
 * in-process communicators sharing the test's GPU (src/comm/local.ts) or module workers with a
 * device each (mesh_worker.ts), the gather of their
 * shards into full parameters, and the exact per-rank traffic formula the tests check.
 */
import '../util/plane.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { gptParamSpecs } from '../../src/models/gpt.ts';
import { type ParallelPlan, planGroup, planMesh, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { shardKind, unshardParam } from '../../src/parallel/tensor/tp_table.ts';
import { paddedVocab } from '../../src/parallel/plan/plan.ts';
import { sequenceParallelGradElements } from '../../src/parallel/tensor/sequence_parallel.ts';
import { collectiveTraffic } from '../../src/comm/cost.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import { ringAllReduceSent } from './harness.ts';
import { type MeshRunResult, type Named, trainMeshRank } from './mesh_rank.ts';
import { withRankWorld } from '../comm/world.ts';
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel } from './harness.ts';
import { flat, singleRankRun } from './single_rank.ts';
import { rankParams } from '../../src/parallel/plan/plan.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost/cost.ts';
import { sentByDim } from '../../src/parallel/run/run.ts';

export type { MeshRunResult };

/** Trains `over` with `plan` on dp·pp·cp·tp in-process ranks sharing `gpu` (`opts`: MeshTrainer's); results in world-rank order. */
export async function localMeshRun(
  gpu: Gpu,
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
  text: string,
  opts: { bucketBytes?: number | 'layer' } = {},
): Promise<MeshRunResult[]> {
  const world = localWorld(planWorldSize(plan), { timeoutMs: 120_000 });
  try {
    return await onEveryRank(world, (comm) => trainMeshRank(gpu, comm, plan, over, text, opts));
  } finally {
    closeLocalWorld(world);
  }
}

/** The same run on dp·pp·cp·tp module workers (mesh_worker.ts), a device each; always shuts the world down. */
export function workerMeshRun(plan: ParallelPlan, over: Partial<TrainConfig>, text: string): Promise<MeshRunResult[]> {
  return withRankWorld(
    'mesh_worker.ts',
    planWorldSize(plan),
    (w) => w.run<MeshRunResult>('train', { plan, cfg: over, text }),
  );
}

/**
 * Full parameters from the shards of dp index 0: for each name, the tp shards of the first
 * pipeline stage that holds it (wte: stage 0; the last stage's copy is checked separately).
 */
export function gatherMesh(plan: ParallelPlan, shards: Named[], over: Partial<TrainConfig>, vocabSize: number): Named {
  const mesh = planMesh(plan), cfg = parseConfig(over);
  const out: Named = {};
  for (const s of gptParamSpecs({ ...cfg, vocabSize })) {
    const holder = [...Array(plan.pp).keys()].find((pp) => s.name in shards[mesh.rankOf({ dp: 0, pp, cp: 0, tp: 0 })]);
    if (holder === undefined) throw new Error(`no stage holds ${s.name}`);
    const tpShards = planGroup(plan, 'tp', mesh.rankOf({ dp: 0, pp: holder, cp: 0, tp: 0 })).map((r) =>
      shards[r][s.name]
    );
    out[s.name] = unshardParam(shardKind(s.name), tpShards, s.shape);
  }
  return out;
}

/**
 * Elements world rank `r` sends per step, by `group/op`, ring algorithms. With b = B/(dp·m)
 * rows per micro-batch, N = b·T/cp tokens, L_r = nLayer/pp layers on this pipeline rank, first/last =
 * whether it holds stage 0 / S−1:
 * - tp (tp > 1), per micro-batch: without sp (4·L_r + first + last) allReduces of N·C on
 *   `tp[..]/act` (2 forward + 2 backward per layer, embedding forward, head input backward);
 *   with sp as many allGathers and as many reduceScatters of N·C, plus one allReduce per step
 *   of the sp partial gradients (L_r·(4C + 2C) + last·2C + first·T·C) on `tp[..]/sp-grads`;
 *   on the last stage 3 allReduces of N (vocab-parallel cross-entropy) on `tp[..]/ce`;
 * - pp: m·N·C (/tp under sp) elements per own stage with a next stage and per own stage with a
 *   previous one, on `pp[..]:p2p/send`;
 * - embedding group (pp > 1, first or last): one allReduce of wte's shard (V_p/tp)·C;
 * - cp (cp > 1), n = N·C/tp: ring attention per layer and micro-batch 2n(cp−1) K,V forward,
 *   2n(cp−1) K,V + 2n·cp dK,dV backward on `cp[..]/attn:p2p`; Ulysses per layer and micro-batch
 *   allToAlls of 3n (q,k,v) and n (out), forward and backward, on `cp[..]/attn/allToAll`;
 * - dp·cp (> 1): one allReduce (avg) of the rank's packed gradient Ψ_r on `dp[..]/grads`
 *   (`dpcp[..]` with cp); under ZeRO-1 instead a reduce-scatter on `…/grads` and an all-gather on
 *   `…/params` of d·c elements, c = ⌈F/(64·d)⌉·64 for the store's aligned flat length F;
 * - world: one allReduce of 2 elements [squared-norm share, loss share] on `world/scalars`.
 */
export function expectedMeshSent(
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
  vocabSize: number,
  r: number,
  psi: number,
  flatLen: number,
): Sent {
  const cfg = parseConfig(over), c = planMesh(plan).coords(r);
  const { dp, pp: P, cp, tp, microBatches: m, sp } = plan,
    v = plan.schedule === 'interleaved' ? plan.virtualStages : 1,
    S = P * v;
  const { nLayer, nEmbd: C, blockSize: T, batchSize: B } = cfg;
  const N = (B / (dp * m)) * (T / cp), Lr = nLayer / P;
  const stages = [...Array(v).keys()].map((k) => k * P + c.pp), first = c.pp === 0, last = c.pp === P - 1;
  const name = (dim: 'dp' | 'pp' | 'cp' | 'tp') => `${dim}[${planGroup(plan, dim, r).join(',')}]`;
  const out: Sent = {};
  if (tp > 1) {
    // --recompute full repeats each block's 2 forward row-parallel reductions (sp: 2 gathers + 2 scatters) in backward.
    const calls = m * (4 * Lr + (first ? 1 : 0) + (last ? 1 : 0) + (cfg.recompute === 'full' ? 2 * Lr : 0));
    if (!sp) out[`${name('tp')}/act/allReduce`] = calls * ringAllReduceSent(N * C, tp, c.tp);
    else {
      out[`${name('tp')}/act/allGather`] = calls * collectiveTraffic('allGather', 'ring', N * C, tp, c.tp).elements;
      out[`${name('tp')}/act/reduceScatter`] = calls *
        collectiveTraffic('reduceScatter', 'ring', N * C, tp, c.tp).elements;
      const partials = sequenceParallelGradElements(Lr, C, T) - T * C - 2 * C + (last ? 2 * C : 0) +
        (first ? T * C : 0);
      out[`${name('tp')}/sp-grads/allReduce`] = ringAllReduceSent(partials, tp, c.tp);
    }
    if (last) out[`${name('tp')}/ce/allReduce`] = 3 * m * ringAllReduceSent(N, tp, c.tp);
  }
  const act = sp ? (N * C) / tp : N * C;
  const p2p = m * act *
    (stages.filter((s) => s < S - 1 && (s + 1) % P !== c.pp).length +
      stages.filter((s) => s > 0 && (s - 1) % P !== c.pp).length);
  if (p2p) out[`${name('pp')}:p2p/send`] = p2p;
  if (P > 1 && (first || last)) {
    const ends = [planGroup(plan, 'pp', r)[0], planGroup(plan, 'pp', r)[P - 1]];
    out[`embedding[${ends.join(',')}]/allReduce`] = ringAllReduceSent(
      (paddedVocab(vocabSize, tp) / tp) * C,
      2,
      first ? 0 : 1,
    );
  }
  if (cp > 1) {
    const n = N * (C / tp), aa = (x: number) => collectiveTraffic('allToAll', 'direct', x, cp, c.cp).elements;
    // Recomputation (full or selective) runs each attention forward once more in backward.
    const fwd = cfg.recompute === 'none' ? 1 : 2;
    if (plan.cpKind === 'ring') {
      out[`${name('cp')}/attn:p2p/send`] = m * Lr * (2 * n * (cp - 1) * (1 + fwd) + 2 * n * cp);
    } else out[`${name('cp')}/attn/allToAll`] = m * Lr * (1 + fwd) * (aa(3 * n) + aa(n));
  }
  const dpcp = planGroup(plan, 'dp', r).flatMap((x) => planGroup(plan, 'cp', x));
  const sync = `${cp > 1 ? 'dpcp' : 'dp'}[${dpcp.join(',')}]`, d = dpcp.length, i = dpcp.indexOf(r);
  if (plan.zero === 1) {
    const padded = zeroPadded(flatLen, d);
    out[`${sync}/grads/reduceScatter`] = collectiveTraffic('reduceScatter', 'ring', padded, d, i).elements;
    out[`${sync}/params/allGather`] = collectiveTraffic('allGather', 'ring', padded, d, i).elements;
  } else if (d > 1) out[`${sync}/grads/allReduce`] = ringAllReduceSent(psi, d, i);
  out['world/scalars/allReduce'] = ringAllReduceSent(2, planWorldSize(plan), r);
  return out;
}

/** d·c: ZeRO-1's call size for a flat buffer of F elements over d ranks (zero_sync.ts: one bucket of the whole flat buffer). */
export const zeroPadded = (flatLen: number, d: number) => Math.ceil(flatLen / (64 * d)) * 64 * d;

/** The single-rank run a mesh run is checked against (single_rank.ts singleRankRun). */
export type MeshReference = Awaited<ReturnType<typeof singleRankRun>>;

const WTE = 'transformer.wte.weight';

/**
 * cost.ts `stepTraffic` for the mesh trainer equals the measured traffic exactly, by
 * `dim/collective` (groups mapped to dimensions as run.ts `dimOfKey` does for the mesh): tp
 * (with sp: the partial gradients including wpe's T·C on the first stage), pp p2p and the tied
 * embedding, cp (ring: dK,dV's return hop included; Ulysses: packed q,k,v), the dp·cp sync and
 * the 2-element [norm², loss] sum over the world.
 */
function compareWithCost(
  what: string,
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
  V: number,
  r: number,
  sent: Record<string, number>,
  flatLen: number,
): void {
  const cfg = parseConfig(over);
  const model = {
    nLayer: cfg.nLayer,
    nHead: cfg.nHead,
    nEmbd: cfg.nEmbd,
    blockSize: cfg.blockSize,
    batchSize: cfg.batchSize,
    vocabSize: V,
  };
  // ZeRO-1 pads the aligned flat buffer (zero_sync.ts), not Ψ_r: passed as the one bucket's call size.
  const dpcp = plan.dp * plan.cp, buckets = plan.zero ? [zeroPadded(flatLen, dpcp)] : undefined;
  const rows = stepTraffic(plan, model, r, { buckets, trainer: 'mesh', recompute: cfg.recompute });
  deepStrictEqual(
    rows.filter((x) => !x.exact).map((x) => x.what),
    [],
    `${what} rank ${r}: every stepTraffic row exact`,
  );
  const measured = sentByDim(sent);
  deepStrictEqual(
    Object.fromEntries(trafficByKind(rows)),
    measured,
    `${what} rank ${r}: stepTraffic = measured, by dim/collective`,
  );
}

/**
 * Checks a mesh run against the plain single-rank run of its global batch: losses within 1e-4
 * relative and norms within 1e-3 on every rank, the parameters each rank holds = plan.ts
 * rankParams, the elements sent every step = {@link expectedMeshSent} and = cost.ts stepTraffic,
 * the gathered step-0 gradients (RMS) and final parameters, dp/cp replicas and the tied
 * embedding's copies identical.
 */
export function checkMeshRun(
  what: string,
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
  res: MeshRunResult[],
  ref: MeshReference,
): void {
  const cfg = parseConfig(over);
  // Not the whole config: its MoE fields (nExpert) would make plan.ts count experts.
  const model = {
    nLayer: cfg.nLayer,
    nHead: cfg.nHead,
    nEmbd: cfg.nEmbd,
    blockSize: cfg.blockSize,
    batchSize: cfg.batchSize,
    vocabSize: ref.vocabSize,
  };
  for (const [r, x] of res.entries()) {
    ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
    ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `${what} rank ${r}: grad norms ${x.gradNorms} vs ${ref.gradNorms}`);
    equal(
      x.count,
      rankParams(plan, model, r).dense,
      `${what} rank ${r}: parameters held ${x.count} vs plan.ts rankParams ${rankParams(plan, model, r).dense}`,
    );
    const want = expectedMeshSent(plan, over, ref.vocabSize, r, x.count, x.flat);
    for (const [s, sent] of x.sent.entries()) deepStrictEqual(sent, want, `${what} rank ${r} step ${s}: elements sent`);
    compareWithCost(what, plan, over, ref.vocabSize, r, x.sent[0], x.flat);
  }
  const names = Object.keys(ref.grads0);
  // Under ZeRO-1 no rank holds the whole reduced gradient (the norms above check it globally).
  if (!plan.zero) {
    assertRelRms(
      flat(gatherMesh(plan, res.map((x) => x.grads0), over, ref.vocabSize), names),
      flat(ref.grads0, names),
      `${what}: step-0 gradients`,
    );
  }
  assertClose(
    flat(gatherMesh(plan, res.map((x) => x.params), over, ref.vocabSize), names),
    flat(ref.params, names),
    `${what}: parameters after 10 steps`,
  );
  const mesh = planMesh(plan);
  for (let r = 0; r < res.length; r++) {
    const c = mesh.coords(r);
    // dp replicas end bit-identical (same averaged gradients, same update).
    if (c.dp > 0 || c.cp > 0) {
      deepStrictEqual(
        res[r].params,
        res[mesh.rankOf({ ...c, dp: 0, cp: 0 })].params,
        `${what}: dp/cp replica ${r} diverged`,
      );
    }
    // The head's wte copy stays equal to stage 0's (embedding-group gradient sum).
    if (plan.pp > 1 && c.pp === plan.pp - 1) {
      deepStrictEqual(
        res[r].params[WTE],
        res[mesh.rankOf({ ...c, pp: 0 })].params[WTE],
        `${what}: wte copy of rank ${r}`,
      );
    }
  }
}
