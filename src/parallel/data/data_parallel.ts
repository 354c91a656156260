/**
 * What data parallelism (picotron's data_parallel.py; PyTorch DDP, Li et al. arXiv 2006.15704)
 * means in the mesh trainer's gradient sync — whole replicas with DDP's overlapped buckets
 * (grad_sync.ts) and ZeRO (zero_sync.ts): its options and sub-group naming. Its rules (dp divides the global
 * batch over micro-batches, no goldfish masking) are entries of the plan's one table (plan/rule_table.ts).
 *
 * - Batch: micro-batch j (B, T) is rows [j·B, (j+1)·B) of the step's one global batch, as the
 *   single-rank Trainer draws it (data/dataset.ts); rank r of d takes rows [j·B + r·B/d,
 *   j·B + (r+1)·B/d) of it (`microBatchRows(j, B, r, d)`, `dataset.rows('train', T, seed, step,
 *   from, to)`). Each rank's loss is the mean over its rows, so the average over ranks
 *   of losses and gradients is the global mean — exact only when every rank counts the same
 *   number of targets, which is why goldfish masking (uneven masks) is refused.
 * - Gradient accumulation: micro-batches before the last only accumulate locally (DDP's
 *   `no_sync`); the last one's backward launches the bucketed collective as each bucket's
 *   gradients become final (see buckets.ts for what overlaps).
 *
 * Communication per step and rank (ring allReduce of each bucket of n_k elements, chunks from
 * `chunkOffsets(n_k, d)`): Σ_k (2·n_k − chunk_r − chunk_{r+1}) elements, i.e. 2(d−1)/d·Ψ_flat
 * when every bucket splits evenly (docs/design.md#communication-per-optimizer-step).
 */
import type { Communicator } from '../../comm/communicator.ts';

/** Options shared by data parallelism and ZeRO. */
export interface DataParallelOptions {
  /** Gradient bucket size in bytes (default 1 MiB, rounded up to whole parameters) or 'layer'. */
  bucketBytes?: number | 'layer';
}

/** Group ids derived from the dp group, one per purpose, so each keeps its own call order and traffic count. */
export function subGroup(comm: Communicator, purpose: string): Communicator {
  return comm.newGroup([...comm.ranks], `${comm.id}/${purpose}`);
}
