/**
 * Tensor- and sequence-parallel communication as autograd functions, named after Megatron-LM
 * `core/tensor_parallel/mappings.py` (Shoeybi et al., arXiv 1909.08053, §3: the conjugate f / g
 * operators; Korthikanti et al., arXiv 2205.05198, §4.2.2: the sequence-parallel g / ḡ pair).
 * Each is one {@link collectiveOp}: a host-side forward through the tensor-parallel group's
 * Communicator and the conjugate collective in backward.
 *
 * Layout: activations are (N, C) rows, N = B·T (src/models/gpt.ts keeps (B, T, C) row-major,
 * so a row is one token). The sequence-parallel region holds rows [r·N/p, (r+1)·N/p) of rank
 * r of p: contiguous rows, so gathers and scatters are plain allGather / reduceScatter chunks
 * (Megatron's [s, b, h] layout splits along s, which is also its leading dimension).
 *
 * Elements rank r sends per call (ring algorithms, src/comm/algorithms.ts), for n = N·C:
 * allReduce 2n − chunk_r − chunk_{r+1}; allGather and reduceScatter n − one chunk (n(p−1)/p
 * when p divides n).
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { collectiveOp } from '../../autograd/collective.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';

/** Rows of x (N, C) given its last dimension; throws when N does not split over the group. */
function rowsOf(x: Tensor, what: string, group: FloatCollectives, split: boolean): { n: number; c: number } {
  const c = x.shape[x.shape.length - 1];
  const n = x.size / c;
  if (!Number.isInteger(n) || c < 1) throw new Error(`${what}: input [${x.shape}] is not (N, C)`);
  if (split && n % group.size) {
    throw new Error(
      `${what}: ${n} rows do not split over the ${group.size} ranks of group ${group.id}; B·T must be a multiple of tp`,
    );
  }
  return { n, c };
}

/**
 * Megatron's f (`copy_to_tensor_model_parallel_region`): identity forward, allReduce (sum) of
 * the gradient backward. Sits before a column-parallel layer whose input (N, C) is replicated:
 * each rank's partial input gradient covers only its output columns.
 * @param x (N, C) replicated over `group`. @returns y (N, C), the same values.
 * @throws Error when x is not two-dimensional in its last axis (see rowsOf).
 */
export function copyToTensorParallelRegion(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'copyToTensorParallelRegion', group, false);
  return collectiveOp(
    tape,
    x,
    [n, c],
    'copyToTensorParallelRegion',
    (h) => Promise.resolve(h),
    (dy) => group.allReduce(dy),
  );
}

/**
 * Megatron's g (`reduce_from_tensor_model_parallel_region`): allReduce (sum) forward, identity
 * backward. Sums the partial outputs of a row-parallel layer or the vocab-parallel embedding.
 * @param x (N, C) this rank's partial sum. @returns y (N, C), the sum over `group`.
 */
export function reduceFromTensorParallelRegion(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'reduceFromTensorParallelRegion', group, false);
  return collectiveOp(
    tape,
    x,
    [n, c],
    'reduceFromTensorParallelRegion',
    (h) => group.allReduce(h),
    (dy) => Promise.resolve(dy),
  );
}

/**
 * Sequence parallelism's g (`gather_from_sequence_parallel_region`): all-gather of the rows
 * forward, reduce-scatter (sum) of the gradient backward. Sits before column-parallel layers.
 * @param x (N/p, C) this rank's rows. @returns y (N, C), every rank's rows in rank order.
 */
export function gatherFromSequenceParallelRegion(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'gatherFromSequenceParallelRegion', group, false);
  return collectiveOp(
    tape,
    x,
    [n * group.size, c],
    'gatherFromSequenceParallelRegion',
    (h) => group.allGather(h),
    async (dy) => (await group.reduceScatter(dy)).slice(),
  );
}

/**
 * Sequence parallelism's ḡ (`reduce_scatter_to_sequence_parallel_region`): reduce-scatter
 * (sum) forward, all-gather of the gradient backward. Replaces g's allReduce after
 * row-parallel layers, leaving each rank the sum of its own rows.
 * @param x (N, C) this rank's partial sum. @returns y (N/p, C), rows [r·N/p, (r+1)·N/p) of the sum.
 * @throws Error when N is not a multiple of the group size.
 */
export function reduceScatterToSequenceParallelRegion(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'reduceScatterToSequenceParallelRegion', group, true);
  return collectiveOp(
    tape,
    x,
    [n / group.size, c],
    'reduceScatterToSequenceParallelRegion',
    async (h) => (await group.reduceScatter(h)).slice(),
    (dy) => group.allGather(dy),
  );
}

/**
 * `scatter_to_sequence_parallel_region`: keeps this rank's rows forward, all-gathers the
 * gradient backward. For a replicated activation entering the sequence-parallel region
 * (Megatron uses it after the embedding when learned positions are added; this sandbox's GPT
 * reduce-scatters instead, see rank_context.ts, so only tests use it).
 * @param x (N, C) replicated. @returns y (N/p, C).
 * @throws Error when N is not a multiple of the group size.
 */
export function scatterToSequenceParallelRegion(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'scatterToSequenceParallelRegion', group, true);
  const rows = n / group.size, r = group.rank;
  return collectiveOp(
    tape,
    x,
    [rows, c],
    'scatterToSequenceParallelRegion',
    (h) => Promise.resolve(h.slice(r * rows * c, (r + 1) * rows * c)),
    (dy) => group.allGather(dy),
  );
}

/**
 * This rank's rows of a tensor every rank computed identically, with no communication either
 * way: forward keeps rows [r·N/p, (r+1)·N/p), backward zero-pads the gradient to (N, C). The
 * gradient reaching x is then this rank's part only, so parameters behind x (the positional
 * table under sequence parallelism) need their gradients summed over the group, as LayerNorm
 * weights do (Korthikanti et al. §4.2.2). Not a Megatron mapping; a local split.
 * @param x (N, C). @returns y (N/p, C).
 * @throws Error when N is not a multiple of the group size.
 */
export function localSequenceRows(tape: Tape, x: Tensor, group: FloatCollectives): Promise<Tensor> {
  const { n, c } = rowsOf(x, 'localSequenceRows', group, true);
  const rows = n / group.size, r = group.rank;
  return collectiveOp(
    tape,
    x,
    [rows, c],
    'localSequenceRows',
    (h) => Promise.resolve(h.slice(r * rows * c, (r + 1) * rows * c)),
    (dy) => {
      const dx = new Float32Array(n * c);
      dx.set(dy, r * rows * c);
      return Promise.resolve(dx);
    },
  );
}
