/**
 * How a split run's MoE routing differs from one token group per micro-batch (docs/design.md#moe-under-dp-and-zero).
 * Each dp rank (each tp rank under sp) routes its own rows as one
 * GShard local group, with capacity ⌈cf·k·tokens/E⌉ of its own tokens, while the single-rank run
 * routes the whole micro-batch at once. With the same weights every token picks the same experts
 * (top-k reads its own router row only), so the routings differ only in which choices the capacity
 * keeps: within a (group, expert, choice j) both keep a prefix of the same tokens in token order,
 * so the assignments kept by one and dropped by the other number |kept_split − kept_whole| there,
 * computable from each group's demand per (expert, choice) alone.
 */
import { expertCapacity } from '../../kernels/moe.ts';
import type { Gpu } from '../../gpu/context.ts';
import type { MoELanguageModel, MoELayers } from '../../models/moe_layer.ts';

/** One rank's routing of one step: its group's demand per (expert, choice) of each MoE forward. */
export interface RankRouting {
  /** This rank's token group in the whole micro-batch's token order (dp index, then tp index under sp). */
  group: number;
  /** Token groups each micro-batch is split into. */
  groups: number;
  /** Tokens in each group. */
  tokens: number;
  /** Per MoE forward of the step: block, micro-batch and demand d[e·k + j] (tokens whose j-th choice is e). */
  calls: { layer: number; micro: number; demand: number[] }[];
}

/** Choice assignments of one step, and how the split's capacity limit treated them. */
export interface SplitRouting {
  /** Token assignments routed (tokens · k, summed over MoE forwards). */
  assignments: number;
  /** Assignments kept by one routing and dropped by the other. */
  differ: number;
  /** Assignments over capacity in the split run, and with one group per micro-batch. */
  droppedSplit: number;
  droppedWhole: number;
}

/** d[e·k + j] = the tokens of top (N, k) whose j-th choice is expert e. @throws Error on an expert id outside 0…E−1. */
export function choiceDemand(top: ArrayLike<number>, e: number, k: number): number[] {
  const d = new Array(e * k).fill(0);
  for (let q = 0; q < top.length; q++) {
    const x = top[q];
    if (!(x >= 0 && x < e)) throw new Error(`choiceDemand: expert ${x} of choice ${q} is outside 0…${e - 1}`);
    d[x * k + (q % k)]++;
  }
  return d;
}

/**
 * Compares routing `demands` (one per group, in token order, each from {@link choiceDemand}) as
 * separate groups of `tokens` each with routing them as one group, both filling first choices
 * before second ones in token order (kernels/moe.ts assignSlots).
 * @throws Error when a demand has not E·k entries or a group's demand per choice is not `tokens`.
 */
export function splitRouting(
  demands: number[][],
  tokens: number,
  e: number,
  k: number,
  capacityFactor: number,
): SplitRouting {
  for (const [g, d] of demands.entries()) {
    if (d.length !== e * k) throw new Error(`splitRouting: group ${g} has ${d.length} demands, not E·k = ${e * k}`);
    for (let j = 0; j < k; j++) {
      const sum = d.filter((_, i) => i % k === j).reduce((a, b) => a + b, 0);
      if (sum !== tokens) throw new Error(`splitRouting: group ${g} choice ${j} sums to ${sum}, not ${tokens} tokens`);
    }
  }
  const G = demands.length, capSplit = expertCapacity(tokens, e, k, capacityFactor);
  const capWhole = expertCapacity(tokens * G, e, k, capacityFactor);
  let differ = 0, keptSplit = 0, keptWhole = 0;
  for (let x = 0; x < e; x++) {
    const fill = new Array(G).fill(0);
    let whole = 0;
    for (let j = 0; j < k; j++) {
      for (let g = 0; g < G; g++) {
        const d = demands[g][x * k + j];
        const s = Math.min(d, capSplit - fill[g]), w = Math.min(d, capWhole - whole);
        fill[g] += s;
        whole += w;
        keptSplit += s;
        keptWhole += w;
        differ += Math.abs(s - w);
      }
    }
  }
  const assignments = G * tokens * k;
  return { assignments, differ, droppedSplit: assignments - keptSplit, droppedWhole: assignments - keptWhole };
}

/**
 * One step's {@link SplitRouting} from every rank's {@link RankRouting} (undefined for a rank that
 * routes no group of its own, e.g. tp index > 0 without sp): per (block, micro-batch) the groups'
 * demands in token order. Undefined when no rank routed anything.
 * @throws Error when a (block, micro-batch) misses a group or has one twice.
 */
export function combineRouting(
  parts: (RankRouting | undefined)[],
  moe: { nExpert: number; moeTopK: number; capacityFactor: number },
): SplitRouting | undefined {
  const by = new Map<string, { groups: number; tokens: number; demands: number[][] }>();
  for (const p of parts) {
    for (const c of p?.calls ?? []) {
      const key = `block ${c.layer} micro-batch ${c.micro}`;
      const at = by.get(key) ?? { groups: p!.groups, tokens: p!.tokens, demands: [] };
      if (at.demands[p!.group]) throw new Error(`combineRouting: ${key} has group ${p!.group} twice`);
      at.demands[p!.group] = c.demand;
      by.set(key, at);
    }
  }
  if (!by.size) return undefined;
  const sum: SplitRouting = { assignments: 0, differ: 0, droppedSplit: 0, droppedWhole: 0 };
  for (const [key, at] of by) {
    const missing = [...Array(at.groups).keys()].filter((g) => !at.demands[g]);
    if (missing.length) throw new Error(`combineRouting: ${key} misses group(s) ${missing.join(', ')}`);
    const r = splitRouting(at.demands, at.tokens, moe.nExpert, moe.moeTopK, moe.capacityFactor);
    for (const f of Object.keys(sum) as (keyof SplitRouting)[]) sum[f] += r[f];
  }
  return sum;
}

/**
 * Records a rank's {@link RankRouting} while its trainer steps: the `top` of every MoE forward
 * of the step, read back as it is routed (one small i32 copy per MoE forward). Validation
 * forwards between steps are not recorded.
 */
export class RoutingLog {
  private reads: { layer: number; top: Promise<ArrayLike<number>> }[] = [];

  /**
   * @param layers the rank's MoE layers; @param group, groups its token group in the micro-batch's order;
   * @param tokens tokens per group (rows · T of one micro-batch on this rank).
   */
  constructor(
    private readonly gpu: Gpu,
    private readonly layers: MoELayers,
    readonly group: number,
    readonly groups: number,
    readonly tokens: number,
  ) {}

  /** Starts recording the step's MoE forwards. */
  start(): void {
    this.reads = [];
    this.layers.onRoute = (layer, r) => this.reads.push({ layer, top: this.gpu.read(r.top) });
  }

  /** Stops recording; the step's routing, forwards of each block numbered by micro-batch in the order they ran. */
  async finish(): Promise<RankRouting> {
    this.layers.onRoute = null;
    const { nExpert: e, topK: k } = this.layers.moe, seen = new Map<number, number>(), calls = [];
    for (const r of this.reads) {
      const micro = seen.get(r.layer) ?? 0;
      seen.set(r.layer, micro + 1);
      calls.push({ layer: r.layer, micro, demand: choiceDemand(await r.top, e, k) });
    }
    this.reads = [];
    return { group: this.group, groups: this.groups, tokens: this.tokens, calls };
  }
}

/**
 * The routing log of a mesh rank (src/parallel/mesh/mesh_trainer.ts) whose micro-batches are routed in
 * more than one token group: dp groups, dp·tp under sp. Null for a dense model, an unsplit
 * routing, a tp rank > 0 without sp (it routes tp rank 0's tokens again) and under cp (whose token
 * groups are not contiguous in the micro-batch, which the count assumes).
 * @param model the rank's model (its MoE layers, if any); @param rows rows of each micro-batch on this rank;
 * @param t tokens of each row on this rank.
 */
export function routingLogOf(
  gpu: Gpu,
  model: object,
  plan: { dp: number; tp: number; cp: number; sp?: boolean },
  coords: { dp: number; tp: number },
  rows: number,
  t: number,
): RoutingLog | null {
  const layers = (model as Partial<MoELanguageModel>).moeLayers;
  const sp = plan.sp && plan.tp > 1, groups = plan.dp * (sp ? plan.tp : 1);
  if (!layers || groups === 1 || plan.cp > 1 || (!sp && coords.tp !== 0)) return null;
  const group = sp ? coords.dp * plan.tp + coords.tp : coords.dp;
  return new RoutingLog(gpu, layers, group, groups, (rows * t) / (sp ? plan.tp : 1));
}
