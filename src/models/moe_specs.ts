/**
 * The static side of the mixture-of-experts sub-layer (moe_layer.ts): its config and checks,
 * which blocks carry experts, the parameters one MoE MLP declares, which parameters are experts,
 * the placement of an expert-parallel rank's shard, and the expert parameters a forward leaves
 * idle. None of it touches the GPU or a tape, so model builders, the registry and parallel
 * trainers read it without the routing layer.
 */
import type { ParamSpec, Placement } from '../nn/params.ts';

/** The MoE knobs (config keys nExpert, topK, capacityFactor, auxLossWeight, moeEvery). */
export interface MoEConfig {
  /** Experts E per MoE layer. */
  nExpert: number;
  /** Experts per token: 1 (Switch) or 2 (GShard). */
  topK: number;
  /** Slots per expert = ⌈capacityFactor·topK·tokens/E⌉ per group. */
  capacityFactor: number;
  /** α of the load-balancing loss (Switch uses 0.01); 0 turns it off. */
  auxLossWeight: number;
  /** Every moeEvery-th block (the last of each run of moeEvery) has a MoE MLP; 1 = all. */
  moeEvery: number;
  /** Token groups routed independently (default 1); must divide the tokens B·T of a forward pass. */
  groups?: number;
}

/** Switch Transformer's defaults: top-1, capacity factor 1.25, α = 0.01, every block. */
export const DEFAULT_MOE: Readonly<MoEConfig> = {
  nExpert: 4,
  topK: 1,
  capacityFactor: 1.25,
  auxLossWeight: 0.01,
  moeEvery: 1,
};

/**
 * Checks a MoE config and returns it.
 * @throws Error naming the violated rule (allowed: nExpert ≥ 1, topK 1 or 2 ≤ nExpert,
 *   capacityFactor > 0, auxLossWeight ≥ 0, moeEvery ≥ 1, groups ≥ 1).
 */
export function validateMoEConfig(moe: MoEConfig): MoEConfig {
  const int = (k: keyof MoEConfig, v: number | undefined) => {
    if (v !== undefined && (!Number.isInteger(v) || v < 1)) {
      throw new Error(`moe: ${k} must be a positive integer, got ${v}`);
    }
  };
  int('nExpert', moe.nExpert);
  int('moeEvery', moe.moeEvery);
  int('groups', moe.groups);
  if (moe.topK !== 1 && moe.topK !== 2) throw new Error(`moe: topK must be 1 or 2, got ${moe.topK}`);
  if (moe.topK > moe.nExpert) throw new Error(`moe: topK ${moe.topK} exceeds nExpert ${moe.nExpert}`);
  if (!(moe.capacityFactor > 0)) throw new Error(`moe: capacityFactor must be > 0, got ${moe.capacityFactor}`);
  if (!(moe.auxLossWeight >= 0)) throw new Error(`moe: auxLossWeight must be ≥ 0, got ${moe.auxLossWeight}`);
  return moe;
}

/** Whether block i has a MoE MLP. */
export const isMoELayer = (moe: MoEConfig, i: number) => i % moe.moeEvery === moe.moeEvery - 1;

/** The experts [first, first + count) one expert-parallel rank holds. */
export interface ExpertShard {
  first: number;
  count: number;
}

/**
 * One MoE MLP's parameters under `prefix` (e.g. `transformer.h.3.mlp`): `router.weight` (E, C)
 * ~ N(0, 0.02), then per expert e `experts.{e}.c_fc` (4C, C) ~ N(0, 0.02) and
 * `experts.{e}.c_proj` (C, 4C) ~ N(0, projStd), biases (zeros) when `bias` — the dense MLP's
 * shapes and init (GPT-2), so a Mamba or hybrid block can declare the same layer.
 */
export function moeLayerSpecs(prefix: string, c: number, nExpert: number, bias: boolean, projStd: number): ParamSpec[] {
  const out: ParamSpec[] = [{
    name: `${prefix}.router.weight`,
    shape: [nExpert, c],
    init: { kind: 'normal', std: 0.02 },
    decay: true,
  }];
  const lin = (n: string, shape: number[], std: number) => {
    out.push({ name: `${n}.weight`, shape, init: { kind: 'normal', std }, decay: true });
    if (bias) out.push({ name: `${n}.bias`, shape: [shape[0]], init: { kind: 'const', value: 0 }, decay: false });
  };
  for (let e = 0; e < nExpert; e++) {
    lin(`${prefix}.experts.${e}.c_fc`, [4 * c, c], 0.02);
    lin(`${prefix}.experts.${e}.c_proj`, [c, 4 * c], projStd);
  }
  return out;
}

/**
 * An expert parameter's expert index (any name with `.experts.{e}.`, as {@link moeLayerSpecs}
 * declares) and its block (`.h.{i}.` or `.layers.{i}.`, −1 when absent), or null for dense parameters.
 */
export function expertOf(name: string): { layer: number; expert: number } | null {
  const m = /\.experts\.(\d+)\./.exec(name);
  if (!m) return null;
  const l = /(?:^|\.)(?:h|layers)\.(\d+)\./.exec(name);
  return { layer: l ? Number(l[1]) : -1, expert: Number(m[1]) };
}

/**
 * The {@link Placement} of an expert-parallel rank: every dense parameter and the experts of
 * `shard`, whole (nn/params.ts placeSpecs still draws every weight in declaration order, so a
 * shard's weights equal the full model's); then `outer`'s placement of what it keeps, if given.
 * @throws Error for a shard outside 0 … nExpert (`what` names the model).
 */
export function expertPlacement(nExpert: number, shard: ExpertShard, what: string, outer?: Placement): Placement {
  const { first, count } = shard;
  if (!Number.isInteger(first) || !Number.isInteger(count) || first < 0 || count < 1 || first + count > nExpert) {
    throw new Error(`${what}: expert shard [${first}, ${first + count}) is not inside 0 … ${nExpert}`);
  }
  return (s) => {
    const x = expertOf(s.name);
    if (x && (x.expert < first || x.expert >= first + count)) return null;
    return outer ? outer(s) : { shape: s.shape, slice: (full) => full };
  };
}

/** Elements of the experts' parameters in the MoE layers a forward does not use: (E − topK) experts per MoE layer. */
export function inactiveExpertParams(moe: MoEConfig, nLayer: number, c: number, bias: boolean): number {
  const moeLayers = [...Array(nLayer).keys()].filter((i) => isMoELayer(moe, i)).length;
  return moeLayers * (moe.nExpert - moe.topK) * (8 * c * c + (bias ? 5 * c : 0));
}
