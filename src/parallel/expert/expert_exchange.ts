/**
 * One MoE MLP across an expert-parallel group (GShard, Lepikhin et al. arXiv 2006.16668;
 * Megatron-LM `core/transformer/moe/token_dispatcher.py` MoEAlltoAllTokenDispatcher): the
 * capacity-padded all-to-all exchanges, on the host and as autograd functions, and the forward
 * pass that runs every MoE layer of a MoELanguageModel that way, and which experts an EP rank
 * holds. The mesh trainer (stages.ts, grad_sync.ts) lays out the groups and trains; this module is
 * the per-layer data movement, usable with any EP group.
 *
 * One MoE layer on rank r:
 * 1. route its own N = b·T tokens as one group (kernels/moe.ts) and gather them into
 *    capacity-padded slots (E, cap, C) — GShard's fixed-size dispatch buffer, so every
 *    all-to-all chunk has the same size and no counts are exchanged first;
 * 2. allToAll over the EP group: the chunk of experts [d·E/ep, (d+1)·E/ep) goes to EP index d,
 *    which receives (E/ep, ep·cap, C): for each local expert, cap rows from every source in order;
 * 3. apply the local experts;
 * 4. the inverse allToAll brings every slot's output home, where it is combined with the gates.
 * Backward runs the same two allToAlls on the gradients in reverse (collectiveOp pairs).
 *
 * Routing each rank's tokens as one group equals the single-rank model with `groups = dp`
 * (moe_layer.ts): same capacities, drops and load-balancing loss, so the losses match.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { collectiveOp } from '../../autograd/collective.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import type { ForwardOptions, ForwardResult } from '../../models/model.ts';
import type { MoECall, MoELanguageModel } from '../../models/moe_layer.ts';
import type { ExpertShard } from '../../models/moe_specs.ts';

/**
 * The experts rank `index` of an EP group of `ep` holds: [index·E/ep, (index+1)·E/ep).
 * @throws Error when ep does not divide E or index is outside 0 … ep−1.
 */
export function expertShard(nExpert: number, ep: number, index: number): ExpertShard {
  if (!Number.isInteger(ep) || ep < 1 || nExpert % ep) {
    throw new Error(`expert parallel: ep ${ep} must divide the ${nExpert} experts`);
  }
  if (!Number.isInteger(index) || index < 0 || index >= ep) {
    throw new Error(`expert parallel: rank index ${index} is outside 0 … ${ep - 1}`);
  }
  return { first: (index * nExpert) / ep, count: nExpert / ep };
}

/** Layout of one exchange: E experts, ep ranks, cap slots per expert and rank, width C; rows of the local (R1) and expert-side (Rep) blocks. */
export interface ExchangeGeometry {
  e: number;
  ep: number;
  cap: number;
  c: number;
  localRows: number;
  expertRows: number;
}

/**
 * (E, localRows, C) slot rows of this rank → (E/ep, expertRows, C) rows of its experts, row
 * l·expertRows + s·cap + i holding source rank s's slot i of local expert l (padding rows 0).
 */
export async function allToAllToExperts(
  comm: FloatCollectives,
  x: Float32Array,
  g: ExchangeGeometry,
): Promise<Float32Array> {
  const { e, ep, cap, c, localRows, expertRows } = g, el = e / ep, row = cap * c;
  const send = new Float32Array(e * row);
  for (let x0 = 0; x0 < e; x0++) send.set(x.subarray(x0 * localRows * c, x0 * localRows * c + row), x0 * row);
  const recv = await comm.allToAll(send);
  const out = new Float32Array(el * expertRows * c);
  for (let s = 0; s < ep; s++) {
    for (let l = 0; l < el; l++) {
      out.set(recv.subarray((s * el + l) * row, (s * el + l + 1) * row), (l * expertRows + s * cap) * c);
    }
  }
  return out;
}

/** The inverse of {@link allToAllToExperts}: expert outputs (E/ep, expertRows, C) back to the ranks their tokens came from, (E, localRows, C). */
export async function allToAllFromExperts(
  comm: FloatCollectives,
  y: Float32Array,
  g: ExchangeGeometry,
): Promise<Float32Array> {
  const { e, ep, cap, c, localRows, expertRows } = g, el = e / ep, row = cap * c;
  const send = new Float32Array(e * row);
  for (let s = 0; s < ep; s++) {
    for (let l = 0; l < el; l++) {
      send.set(y.subarray((l * expertRows + s * cap) * c, (l * expertRows + s * cap) * c + row), (s * el + l) * row);
    }
  }
  const recv = await comm.allToAll(send);
  const out = new Float32Array(e * localRows * c);
  for (let x0 = 0; x0 < e; x0++) out.set(recv.subarray(x0 * row, (x0 + 1) * row), x0 * localRows * c);
  return out;
}

/** Dispatch as an autograd function: forward {@link allToAllToExperts}, backward its inverse. */
export function dispatchToExperts(
  tape: Tape,
  xe: Tensor,
  comm: FloatCollectives,
  g: ExchangeGeometry,
): Promise<Tensor> {
  return collectiveOp(
    tape,
    xe,
    [(g.e / g.ep) * g.expertRows, g.c],
    'moe.dispatch.allToAll',
    (x) => allToAllToExperts(comm, x, g),
    (dy) => allToAllFromExperts(comm, dy, g),
  );
}

/** Combine's exchange as an autograd function: forward {@link allToAllFromExperts}, backward {@link allToAllToExperts}. */
export function combineFromExperts(
  tape: Tape,
  ye: Tensor,
  comm: FloatCollectives,
  g: ExchangeGeometry,
): Promise<Tensor> {
  return collectiveOp(
    tape,
    ye,
    [g.e * g.localRows, g.c],
    'moe.combine.allToAll',
    (y) => allToAllFromExperts(comm, y, g),
    (dx) => allToAllToExperts(comm, dx, g),
  );
}

/** One MoE MLP across the EP group `comm` (model holds this rank's shard of the experts). */
export async function moeExpertParallel(
  tape: Tape,
  model: MoELanguageModel,
  call: MoECall,
  comm: FloatCollectives,
): Promise<Tensor> {
  const layers = model.moeLayers;
  const { routing, xe } = layers.route(tape, call.x, call.layer, 1);
  const ep = comm.size, { e, capacity: cap, rows: localRows } = routing.plan, c = layers.c;
  const align = Math.max(64, model.gpu.device.limits.minStorageBufferOffsetAlignment / 4);
  let expertRows = ep * cap;
  while ((expertRows * c) % align) expertRows++;
  const g: ExchangeGeometry = { e, ep, cap, c, localRows, expertRows };
  const xr = await dispatchToExperts(tape, xe, comm, g);
  const yr = layers.experts(tape, xr, call.layer, expertRows);
  const ye = await combineFromExperts(tape, yr, comm, g);
  return layers.combine(tape, ye, routing, call.layer);
}

/**
 * The model's forward with every MoE MLP run across the EP group `comm` (see {@link MoELanguageModel.steps}).
 * @throws Error when the group size differs from the model's shard (E / count).
 */
export async function forwardExpertParallel(
  model: MoELanguageModel,
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  targets: Tensor | null,
  b: number,
  t: number,
  comm: FloatCollectives,
  opts: ForwardOptions = {},
): Promise<ForwardResult> {
  if (model.shard.count * comm.size !== model.moe.nExpert) {
    throw new Error(
      `expert parallel: a group of ${comm.size} ranks needs ${
        model.moe.nExpert / comm.size
      } experts per rank, the model holds ${model.shard.count}`,
    );
  }
  return await model.steps(
    tape,
    tokens,
    hostTokens,
    targets,
    b,
    t,
    opts,
    (call) => moeExpertParallel(tape, model, call, comm),
  );
}
