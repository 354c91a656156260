/**
 * Vocab-parallel embedding and cross-entropy (Megatron-LM `core/tensor_parallel/layers.py`
 * VocabParallelEmbedding and `cross_entropy.py` _VocabParallelCrossEntropy; Shoeybi et al.,
 * arXiv 1909.08053 §3). Rank r of p holds rows [r·V_p/p, (r+1)·V_p/p) of the token embedding,
 * V_p = plan.ts `paddedVocab(V, p)`; rows ≥ V are padding that no token selects and whose
 * logits are excluded (treated as −∞), so the loss equals the unpadded model's.
 *
 * - Embedding: each rank looks up the tokens in its range (others give zero rows) and the
 *   partial sums are reduced across the group: allReduce, or reduce-scatter to the
 *   sequence-parallel rows.
 * - Cross-entropy over logits (N, V_p/p) sharded by vocabulary: three allReduces of N values
 *   (row max, target logit, sum of exponentials), the softmax gradient is then local. The
 *   arithmetic runs on the host inside one {@link collectiveOp} (these ranks are simulated
 *   and already read their data back to communicate); a GPU rank would run the same three
 *   reductions on device tensors.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { embedding, mul } from '../../autograd/ops.ts';
import { collectiveOp } from '../../autograd/collective.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import { reduceFromTensorParallelRegion, reduceScatterToSequenceParallelRegion } from './tp_comm.ts';

/** The vocabulary slice of one rank: global ids [start, start + rows), of which `valid` are < V. */
export interface VocabShard {
  start: number;
  rows: number;
  valid: number;
}

/**
 * Rank `rank`'s slice of a vocabulary of `vocabSize` real ids in `modelVocab` embedding rows
 * (≥ vocabSize: --pad-vocab, models/vocab_pad.ts), padded to a multiple of `tp`. Every row
 * ≥ vocabSize, whichever padding made it, is masked alike.
 * @throws Error on non-positive sizes, modelVocab < vocabSize or a rank outside [0, tp).
 */
export function vocabShard(vocabSize: number, tp: number, rank: number, modelVocab = vocabSize): VocabShard {
  if (
    !Number.isInteger(vocabSize) || vocabSize < 1 || !Number.isInteger(tp) || tp < 1 || !Number.isInteger(rank) ||
    rank < 0 || rank >= tp || !Number.isInteger(modelVocab) || modelVocab < vocabSize
  ) {
    throw new Error(
      `vocabShard: need vocabSize ≥ 1, modelVocab ≥ vocabSize, tp ≥ 1 and 0 ≤ rank < tp; got ${vocabSize}, ${modelVocab}, ${tp}, ${rank}`,
    );
  }
  const rows = Math.ceil(modelVocab / tp), start = rank * rows;
  return { start, rows, valid: Math.max(0, Math.min(rows, vocabSize - start)) };
}

/**
 * Vocab-parallel token embedding: y = Σ_ranks wte_r[tokens] (zero rows for tokens outside a
 * rank's slice), reduced over `group` — allReduce → (B·T, C), or with `sequenceParallel`
 * reduce-scatter → (B·T/p, C). Positions are not added here (see rank_context.ts).
 * @param wte (V_p/p, C) this rank's rows, a parameter. @param hostTokens (B·T) global ids.
 * @throws Error when a token is outside [0, V) or the shapes disagree.
 */
export async function vocabParallelEmbedding(
  tape: Tape,
  wte: Tensor,
  hostTokens: Int32Array,
  shard: VocabShard,
  vocabSize: number,
  group: FloatCollectives,
  b: number,
  t: number,
  sequenceParallel: boolean,
): Promise<Tensor> {
  const [rows, c] = wte.shape;
  if (rows !== shard.rows || hostTokens.length !== b * t) {
    throw new Error(
      `vocabParallelEmbedding: wte [${wte.shape}] vs a shard of ${shard.rows} rows, ${hostTokens.length} tokens vs B·T = ${b}·${t}`,
    );
  }
  const gpu = tape.gpu, n = b * t;
  const local = new Int32Array(n), mask = new Float32Array(n * c);
  for (let i = 0; i < n; i++) {
    const id = hostTokens[i];
    if (!(id >= 0 && id < vocabSize)) {
      throw new Error(`vocabParallelEmbedding: token ${id} at ${i} is outside [0, ${vocabSize})`);
    }
    const j = id - shard.start;
    if (j >= 0 && j < shard.valid) {
      local[i] = j;
      mask.fill(1, i * c, (i + 1) * c);
    }
  }
  // The embedding op always adds a positional table; a frozen zero one keeps this the token part.
  const ids = gpu.upload(local, [b, t], 'i32', 'vpe.ids');
  const noPos = gpu.zeros([t, c], 'f32', 'vpe.nopos');
  const maskT = gpu.upload(mask, [b, t, c], 'f32', 'vpe.mask');
  tape.onDispose(() => [ids, noPos, maskT].forEach((x) => x.release()));
  // Tokens of other ranks looked up row 0; the mask zeroes both their rows and their gradient.
  // (B, T, C) is passed on as is: a view would be a new tensor the tape has no gradient for.
  const partial = mul(tape, embedding(tape, ids, local, wte, noPos, b, t), maskT, 'vpe.partial');
  return await (sequenceParallel
    ? reduceScatterToSequenceParallelRegion(tape, partial, group)
    : reduceFromTensorParallelRegion(tape, partial, group));
}

/** The loss tensor of {@link vocabParallelCrossEntropy} and its value on the host. */
export interface VocabParallelLoss {
  /** (2) = [mean loss, counted rows], as crossEntropy's. */
  loss: Tensor;
  value: number;
}

/**
 * Mean cross-entropy of vocabulary-sharded logits (Megatron's _VocabParallelCrossEntropy):
 * m = max over all ranks' valid columns, z_t = the target's logit (from the rank that holds
 * it), S = Σ exp(logit − m); loss_i = log S + m − z_t. Three allReduces of N elements
 * (max, sum, sum), in that order. Backward (no communication): dlogits = gradScale/count ·
 * (softmax − onehot) on valid columns, 0 on padded ones. The loss is terminal, as crossEntropy:
 * its backward ignores the incoming gradient and seeds gradScale itself.
 * @param logits (N, V_p/p) this rank's columns. @param targets (N) global ids, < 0 ignored.
 * @throws Error when the shapes disagree or a target is ≥ V.
 */
export async function vocabParallelCrossEntropy(
  tape: Tape,
  logits: Tensor,
  targets: Int32Array,
  shard: VocabShard,
  vocabSize: number,
  group: Communicator,
  gradScale = 1,
): Promise<VocabParallelLoss> {
  const n = targets.length, cols = logits.size / Math.max(n, 1);
  if (cols !== shard.rows) {
    throw new Error(`vocabParallelCrossEntropy: logits [${logits.shape}] are not (N=${n}, ${shard.rows})`);
  }
  for (const y of targets) {
    if (y >= vocabSize) throw new Error(`vocabParallelCrossEntropy: target ${y} ≥ vocabulary ${vocabSize}`);
  }
  const { start, valid } = shard;
  let z: Float32Array = new Float32Array(0), max = z, sum = z, count = 0, value = NaN;
  const loss = await collectiveOp(tape, logits, [2], 'vocabParallelCrossEntropy', async (h) => {
    z = h;
    max = new Float32Array(n).fill(-Infinity);
    for (let i = 0; i < n; i++) for (let j = 0; j < valid; j++) max[i] = Math.max(max[i], z[i * cols + j]);
    await group.allReduce(max, { op: 'max' });
    const target = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const j = targets[i] - start;
      if (targets[i] >= 0 && j >= 0 && j < valid) target[i] = z[i * cols + j];
    }
    await group.allReduce(target);
    sum = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (let j = 0; j < valid; j++) s += Math.exp(z[i * cols + j] - max[i]);
      sum[i] = s;
    }
    await group.allReduce(sum);
    let total = 0;
    count = 0;
    for (let i = 0; i < n; i++) {
      if (targets[i] < 0) continue;
      total += Math.log(sum[i]) + max[i] - target[i];
      count++;
    }
    value = count ? total / count : 0;
    return new Float32Array([value, count]);
  }, (_dy) => {
    const dz = new Float32Array(n * cols);
    if (!count) return Promise.resolve(dz);
    const k = gradScale / count;
    for (let i = 0; i < n; i++) {
      if (targets[i] < 0) continue;
      for (let j = 0; j < valid; j++) dz[i * cols + j] = k * Math.exp(z[i * cols + j] - max[i]) / sum[i];
      const jt = targets[i] - start;
      if (jt >= 0 && jt < valid) dz[i * cols + jt] -= k;
    }
    return Promise.resolve(dz);
  });
  return { loss, value };
}
