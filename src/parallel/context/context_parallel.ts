/**
 * Context parallelism for the GPT of src/models/gpt.ts (Megatron-LM context parallelism;
 * picotron context_parallel.py): the cp ranks of a group each hold T/cp tokens of every
 * sequence of the batch and a full replica of the parameters. Every op but attention is
 * per-token, so a rank runs the model's own pieces on its own tokens only, over a RankContext
 * (rank_context.ts) that looks the position embedding up at their global positions and
 * replaces attention by
 * - `ring`: zig-zag ring attention (ring_attention.ts; rank r holds chunks r and 2cp−1−r of
 *   2cp), or
 * - `ulysses`: DeepSpeed-Ulysses all-to-alls around full-sequence flash attention over nh/cp
 *   heads (ulysses.ts; rank r holds tokens [r·T/cp, (r+1)·T/cp)).
 * Each rank's loss is the mean over its B·T/cp targets; all ranks count the same number, so the
 * average over ranks of losses and gradients is the mean over all tokens: the mesh trainer
 * (mesh_trainer.ts) averages the gradients over the dp·cp ranks, Megatron's data-parallel group
 * with context parallelism. This file holds the token layout.
 *
 * Elements sent per step and rank by attention (b rows per micro-batch, s = T/cp, L layers, m
 * micro-batches):
 * - ring:    m·L·(2bsC·(cp−1) [fwd K,V] + 2bsC·(cp−1) [bwd K,V] + 2bsC·cp [bwd dK,dV]) sends;
 * - ulysses: m·L·2·((cp−1)/cp·3bsC + (cp−1)/cp·bsC) in all-to-alls (fwd + bwd).
 */
import type { CpKind } from '../plan/plan.ts';
import { zigzagPositions } from './ring_attention.ts';

/**
 * Global positions of rank r's T/cp tokens: zig-zag chunks for `ring`, the contiguous slice
 * [r·T/cp, (r+1)·T/cp) for `ulysses`.
 * @throws Error when T does not split (2cp chunks for ring, cp for Ulysses).
 */
export function cpPositions(kind: CpKind, r: number, cp: number, t: number): Int32Array {
  if (kind === 'ring') return zigzagPositions(r, cp, t);
  if (t % cp) throw new Error(`Ulysses: sequence ${t} is not divisible by cp ${cp}`);
  const n = t / cp;
  return Int32Array.from({ length: n }, (_, i) => r * n + i);
}

/** Rows `pos` of every sequence of a (B, T) host array, as (B, pos.length). */
export function takePositions(x: Int32Array, b: number, t: number, pos: Int32Array): Int32Array {
  const out = new Int32Array(b * pos.length);
  for (let i = 0; i < b; i++) for (let j = 0; j < pos.length; j++) out[i * pos.length + j] = x[i * t + pos[j]];
  return out;
}
