/**
 * The planner's view of the architectures other than GPT (docs/design.md#communication-per-optimizer-step and
 * docs/design.md#one-model-many-contexts): each rank's parameters counted by building its model (derived_params.ts),
 * so `npm run plan`, the memory table and the dp traffic are exact for every architecture; and the tensor-parallel
 * collectives of a recurrent block, which cost.ts stepTraffic lists for them.
 */
import type { TrainConfig } from '../../train/config.ts';
import { dtRank } from '../../models/mamba.ts';
import type { ArchLayout, ParallelPlan } from '../plan/plan.ts';
import { stageLayers } from '../pipeline/pipeline_stage.ts';
import { derivedRankParams } from './derived_params.ts';
import type { Collective } from '../../comm/cost.ts';
import type { PlanDim } from './cost.ts';

/**
 * The layout of `cfg.arch` for the planner, or undefined for GPT (plan.ts rankParams counts it by its shape). The MoE
 * models count their experts apart (`expert`): this rank's E/ep of each MoE block it holds.
 */
export function archLayout(cfg: TrainConfig, vocabSize: number): ArchLayout | undefined {
  const arch = cfg.arch;
  if (arch === 'gpt') return undefined;
  return {
    arch,
    params: derivedRankParams(cfg, vocabSize),
    dtRank: dtRank(cfg.nEmbd),
    dState: cfg.dState,
    attnEvery: cfg.attnEvery,
    expand: cfg.expand,
    decay: cfg.linearDecay,
    ...(arch === 'recurrent-depth' && {
      recurrence: {
        prelude: cfg.preludeLayers,
        core: cfg.nLayer - cfg.preludeLayers - cfg.codaLayers,
        backprop: cfg.recurBackprop,
        meanIters: cfg.recurIters,
      },
    }),
  };
}

/**
 * Block applications per micro-batch of a rank whose stages hold `pieces` pieces: each block once
 * forward and once backward, except recurrent depth's core piece, whose R blocks run r times
 * forward and min(r, k) times backward (truncated backprop, docs/design.md#recurrent-depth-across-ranks). With r
 * unknown (a plan, not a step) r̄ stands in and the count is not exact.
 */
export function blockApplications(
  lay: ArchLayout | undefined,
  plan: ParallelPlan,
  ppRank: number,
  pieces: number,
  r?: number,
): { fwd: number; bwd: number; exact: boolean } {
  const rec = lay?.recurrence;
  const v = plan.schedule === 'interleaved' ? plan.virtualStages : 1, perStage = pieces / v;
  // The core is piece P; stage st holds pieces [st·n, (st+1)·n), and rank p runs stages p, p + pp, ….
  if (!rec || Math.floor(rec.prelude / perStage) % plan.pp !== ppRank) {
    return { fwd: pieces, bwd: pieces, exact: true };
  }
  const iters = r ?? rec.meanIters;
  return {
    fwd: pieces - 1 + rec.core * iters,
    bwd: pieces - 1 + rec.core * Math.min(iters, rec.backprop),
    exact: r !== undefined,
  };
}

/** cost.ts stepTraffic's row writer. */
export type Push = (dim: PlanDim, what: string, coll: Collective, group: number[], n: number, calls: number) => void;

/**
 * Tensor-parallel collectives of a recurrent stack's blocks (rank_context.ts over mamba.ts,
 * hybrid.ts and linear.ts), per micro-batch. Each RWKV-style block (linear.ts) allReduces its two
 * row-parallel outputs (att.output, ffn.value) forward and the input gradients of its six
 * column-parallel layers backward: r, k, v, gate and decay each read their own token-shift mix,
 * so each has its own f, and ffn.key; its replicated ffn.receptance moves nothing. Under sp those
 * become the six inputs' all-gathers and the two outputs' reduce-scatters, and conjugates in
 * backward (the token shift's halo rows are point to point: cost.ts). Each Mamba mixer sums its out_proj output (sp: reduce-scatter)
 * forward and the in_proj_x / in_proj_z input gradients (sp: their gathers' conjugates)
 * backward, and allReduces its x_proj outputs (b·s·R, b·s·N, b·s·N) forward and their gradients
 * backward (row-inner + f); the hybrid's shared attention block, after every attnEvery-th layer,
 * moves what a GPT block does. Full recomputation repeats each forward call once.
 */
export function recurrentBlockTraffic(
  lay: ArchLayout,
  push: Push,
  group: number[],
  d: {
    b: number;
    s: number;
    C: number;
    m: number;
    sp: boolean;
    full: boolean;
    nLayer: number;
    S: number;
    ppRank: number;
    P: number;
  },
): void {
  const { b, s, C, m, sp, full } = d, bsh = b * s * C;
  const own = [...Array(d.S).keys()].filter((st) => st % d.P === d.ppRank).flatMap((st) => {
    const [lo, hi] = stageLayers(d.nLayer, d.S, st);
    return [...Array(hi - lo).keys()].map((i) => lo + i);
  });
  const mixers = own.length, attn = lay.arch === 'hybrid' ? own.filter((i) => (i + 1) % lay.attnEvery === 0).length : 0;
  const r = full ? 1 : 0;
  if (lay.arch === 'linear' && !sp) {
    push('tp', 'RWKV block row outputs fwd + column inputs bwd', 'allReduce', group, bsh, (2 + 6 + 2 * r) * mixers * m);
    return;
  }
  if (lay.arch === 'linear') {
    // Six column-parallel inputs gathered (r, k, v, gate, decay, ffn.key), two row outputs scattered.
    push(
      'tp',
      'RWKV block column-input gathers fwd + row-output gathers bwd',
      'allGather',
      group,
      bsh,
      (8 + 6 * r) * mixers * m,
    );
    push(
      'tp',
      'RWKV block row-output scatters fwd + column-input scatters bwd',
      'reduceScatter',
      group,
      bsh,
      (8 + 2 * r) * mixers * m,
    );
    return;
  }
  if (!sp) {
    push('tp', 'Mamba out_proj output fwd + in_proj inputs bwd', 'allReduce', group, bsh, (3 + r) * mixers * m);
    push('tp', 'shared attention block outputs fwd + inputs bwd', 'allReduce', group, bsh, (4 + 2 * r) * attn * m);
  } else {
    push('tp', 'Mamba in_proj gathers fwd + out_proj gather bwd', 'allGather', group, bsh, (3 + 2 * r) * mixers * m);
    push('tp', 'Mamba out_proj scatter fwd + in_proj scatters bwd', 'reduceScatter', group, bsh, (3 + r) * mixers * m);
    push('tp', 'shared attention block gathers', 'allGather', group, bsh, (4 + 2 * r) * attn * m);
    push('tp', 'shared attention block scatters', 'reduceScatter', group, bsh, (4 + 2 * r) * attn * m);
  }
  push('tp', 'Mamba x_proj dt output fwd + gradient bwd', 'allReduce', group, b * s * lay.dtRank, (2 + r) * mixers * m);
  push(
    'tp',
    'Mamba x_proj B, C outputs fwd + gradients bwd',
    'allReduce',
    group,
    b * s * lay.dState,
    2 * (2 + r) * mixers * m,
  );
}
