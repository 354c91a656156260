/**
 * Megatron sequence parallelism (Korthikanti et al., "Reducing Activation Recomputation in
 * Large Transformer Models", arXiv 2205.05198, §4.2.2) on top of tensor parallelism: the
 * regions tensor parallelism leaves replicated — LayerNorms, residual adds, bias adds after
 * row-parallel layers (and dropout, which this GPT does not have) — work on this rank's N/p
 * rows of the (N, C) activations instead, N = B·T. Each f / g pair of tp_comm.ts becomes
 * g / ḡ: all-gather before the column-parallel layers, reduce-scatter after the row-parallel
 * ones, the same elements on the wire as the allReduce they replace (an allReduce is a
 * reduce-scatter plus an all-gather) with 1/p of the activation memory in between.
 *
 * Parameters used only on those rows see 1/p of the tokens, so their gradients are partial
 * sums that one allReduce over the tensor-parallel group completes once per step
 * ({@link allReduceSequenceParallelGrads}, Megatron's `_allreduce_layernorm_grads`): the
 * LayerNorm weights and biases, the row-parallel biases, and — because this sandbox adds the
 * learned positions after the embedding's reduce-scatter, on the local rows — the positional
 * table wpe (T × C). The forward itself is the model's own, over a RankContext with
 * `sequenceParallel: true` (rank_context.ts), so both variants share one readable model.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { Param, ParamStore } from '../../nn/params.ts';
import { tpRole } from './tp_table.ts';

/**
 * Whether parameter `name` is applied to sequence-parallel rows only and so needs its gradient
 * summed over the tensor-parallel group: every parameter tp_table.ts replicates — the norms,
 * the row-parallel biases and (GPT) wpe; every other one is sharded and sees all rows.
 */
export function isSequenceParallelPartial(name: string): boolean {
  return tpRole(name) === 'replicated';
}

/** The parameters of `store` that {@link isSequenceParallelPartial} selects, in declaration order. */
export function sequenceParallelPartials(store: ParamStore): Param[] {
  return store.params.filter((p) => isSequenceParallelPartial(p.name));
}

/**
 * Elements of the step's gradient allReduce under sequence parallelism for the GPT of
 * gpt.ts: L·(4C + 2C·bias) + 2C + T·C (LayerNorms, row-parallel biases, ln_f, wpe) — the
 * same count as plan.ts `rankParams(...).spReplicated` on the first pipeline stage.
 */
export function sequenceParallelGradElements(nLayer: number, nEmbd: number, blockSize: number, bias = true): number {
  return nLayer * (4 * nEmbd + (bias ? 2 * nEmbd : 0)) + 2 * nEmbd + blockSize * nEmbd;
}

/**
 * Sums the partial gradients of the sequence-parallel parameters over `group` in one
 * allReduce (one flat host buffer, declaration order) and writes them back, so every rank
 * ends the step with identical replicated gradients. Call after the step's last backward.
 * @returns the number of elements reduced.
 * @throws (rejects with) the collective's error, e.g. a peer that timed out.
 */
export async function allReduceSequenceParallelGrads(
  gpu: Gpu,
  store: ParamStore,
  group: Communicator,
): Promise<number> {
  const params = sequenceParallelPartials(store);
  const total = params.reduce((a, p) => a + p.size, 0);
  const flat = new Float32Array(total);
  const all = await gpu.read(store.grads) as Float32Array; // one read-back instead of one per parameter
  let off = 0;
  for (const p of params) {
    flat.set(all.subarray(p.offset, p.offset + p.size), off);
    off += p.size;
  }
  await group.allReduce(flat);
  off = 0;
  for (const p of params) {
    gpu.write(p.grad, flat.subarray(off, off + p.size));
    off += p.size;
  }
  return total;
}

/** Elements of the sequence-parallel partial gradients among `params` (their tp sum's buffer). */
export function sequenceParallelElements(params: readonly Param[]): number {
  return params.filter((p) => isSequenceParallelPartial(p.name)).reduce((a, p) => a + p.size, 0);
}

/**
 * Sums over `group` (tp) the sequence-parallel partials among `params`, whose gradients sit in
 * `host` at their store offsets less `start` (a ZeRO unit's local gradient, zero_sync.ts): one
 * allReduce of their packed slices, written back in place. Nothing is sent when none is partial.
 */
export async function sumSequenceParallelSlices(
  params: readonly Param[],
  start: number,
  host: Float32Array,
  group: Communicator,
): Promise<void> {
  const ps = params.filter((p) => isSequenceParallelPartial(p.name));
  if (!ps.length) return;
  const part = new Float32Array(sequenceParallelElements(ps));
  ps.reduce((o, p) => (part.set(host.subarray(p.offset - start, p.offset - start + p.size), o), o + p.size), 0);
  await group.allReduce(part);
  ps.reduce((o, p) => (host.set(part.subarray(o, o + p.size), p.offset - start), o + p.size), 0);
}
