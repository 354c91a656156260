/**
 * DeepSpeed-Ulysses sequence parallelism (Jacobs et al., arXiv 2309.14509; DeepSpeed
 * `sequence/layer.py` `_SeqAllToAll` + `DistributedAttention`): the cp ranks each hold a
 * contiguous T/cp slice of the sequence; around attention an all-to-all trades the sequence
 * split for a head split, so every rank runs ordinary (flash) attention over the whole
 * sequence for nh/cp heads, and a second all-to-all trades back.
 *
 *   qkv (B, T/cp, 3C)  —allToAll→  (B, T, 3C/cp)  —flash attention, nh/cp heads→  (B, T, C/cp)
 *   —allToAll→  y (B, T/cp, C)
 *
 * Both all-to-alls are autograd `collective` ops whose backward is the inverse all-to-all.
 * q, k and v travel in one call (one 3C-wide buffer; DeepSpeed sends three), so per layer and
 * rank, with n = B·(T/cp)·C: forward 2 calls sending (cp−1)/cp·3n and (cp−1)/cp·n elements,
 * backward the same — 8·(cp−1)/cp·n in all, as four n-sized all-to-alls each way.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { flashAttention } from '../../autograd/ops.ts';
import { collectiveOp } from '../../autograd/collective.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';

/** Local geometry: batch, the rank's T/cp rows, width C, heads (all of them). */
export interface UlyssesDims {
  b: number;
  /** Rows this rank holds, T/cp. */
  t: number;
  c: number;
  nh: number;
  causal?: boolean;
}

/** Split of a sequence-sharded tensor (B, tl, parts·C) into cp chunks (B, tl, parts·C/cp): chunk j holds heads of rank j. */
function packHeads(x: Float32Array, rows: number, parts: number, c: number, cp: number): Float32Array {
  const hc = c / cp, out = new Float32Array(x.length), chunk = rows * parts * hc;
  for (let j = 0; j < cp; j++) {
    for (let r = 0; r < rows; r++) {
      for (let p = 0; p < parts; p++) {
        const src = r * parts * c + p * c + j * hc;
        out.set(x.subarray(src, src + hc), j * chunk + (r * parts + p) * hc);
      }
    }
  }
  return out;
}

/** Inverse of {@link packHeads}. */
function unpackHeads(chunks: Float32Array, rows: number, parts: number, c: number, cp: number): Float32Array {
  const hc = c / cp, out = new Float32Array(chunks.length), chunk = rows * parts * hc;
  for (let j = 0; j < cp; j++) {
    for (let r = 0; r < rows; r++) {
      for (let p = 0; p < parts; p++) {
        const src = j * chunk + (r * parts + p) * hc;
        out.set(chunks.subarray(src, src + hc), r * parts * c + p * c + j * hc);
      }
    }
  }
  return out;
}

/** Split of a head-sharded (B, cp·tl, w) tensor into cp chunks (B, tl, w): chunk i holds rank i's rows. */
function packSeq(z: Float32Array, b: number, tl: number, w: number, cp: number): Float32Array {
  const out = new Float32Array(z.length), t = cp * tl;
  for (let i = 0; i < cp; i++) {
    for (let bi = 0; bi < b; bi++) {
      const src = (bi * t + i * tl) * w;
      out.set(z.subarray(src, src + tl * w), (i * b + bi) * tl * w);
    }
  }
  return out;
}

/** Inverse of {@link packSeq}. */
function unpackSeq(chunks: Float32Array, b: number, tl: number, w: number, cp: number): Float32Array {
  const out = new Float32Array(chunks.length), t = cp * tl;
  for (let i = 0; i < cp; i++) {
    for (let bi = 0; bi < b; bi++) {
      const src = (i * b + bi) * tl * w;
      out.set(chunks.subarray(src, src + tl * w), (bi * t + i * tl) * w);
    }
  }
  return out;
}

/**
 * Sequence-sharded x (B, T/cp, parts·C) → head-sharded (B, T, parts·C/cp) by one all-to-all
 * (DeepSpeed's `_SeqAllToAll` scattering heads and gathering the sequence); backward the inverse.
 */
export function seqToHeadAllToAll(
  tape: Tape,
  x: Tensor,
  d: UlyssesDims,
  parts: number,
  group: FloatCollectives,
): Promise<Tensor> {
  const cp = group.size, rows = d.b * d.t, w = (parts * d.c) / cp;
  return collectiveOp(tape, x, [d.b, cp * d.t, w], 'ulysses.seqToHead', async (host) => {
    const res = await group.allToAll(packHeads(host, rows, parts, d.c, cp));
    return unpackSeq(res, d.b, d.t, w, cp);
  }, async (dz) => {
    const res = await group.allToAll(packSeq(dz, d.b, d.t, w, cp));
    return unpackHeads(res, rows, parts, d.c, cp);
  });
}

/** Head-sharded z (B, T, C/cp) → sequence-sharded (B, T/cp, C) by one all-to-all; backward the inverse. */
export function headToSeqAllToAll(tape: Tape, z: Tensor, d: UlyssesDims, group: FloatCollectives): Promise<Tensor> {
  const cp = group.size, rows = d.b * d.t, w = d.c / cp;
  return collectiveOp(tape, z, [d.b, d.t, d.c], 'ulysses.headToSeq', async (host) => {
    const res = await group.allToAll(packSeq(host, d.b, d.t, w, cp));
    return unpackHeads(res, rows, 1, d.c, cp);
  }, async (dy) => {
    const res = await group.allToAll(packHeads(dy, rows, 1, d.c, cp));
    return unpackSeq(res, d.b, d.t, w, cp);
  });
}

/**
 * Ulysses attention of this rank's qkv (B, T/cp, 3C), rows = global positions
 * [rank·T/cp, (rank+1)·T/cp): returns y (B, T/cp, C). Every rank of `group` must call it
 * with the same dims in the same order; the tape then needs backwardAsync.
 * @throws Error (rejects) when nh is not divisible by cp, or qkv's size does not match dims.
 */
export async function ulyssesAttention(
  tape: Tape,
  qkv: Tensor,
  dims: UlyssesDims,
  group: FloatCollectives,
  label = 'ulysses_attn',
): Promise<Tensor> {
  const cp = group.size, { b, t, c, nh } = dims;
  for (const k of ['b', 't', 'c', 'nh'] as const) {
    if (!Number.isInteger(dims[k]) || dims[k] < 1) {
      throw new Error(`ulyssesAttention: dims.${k} must be a positive integer, got ${dims[k]}`);
    }
  }
  if (nh % cp || c % nh) {
    throw new Error(`ulyssesAttention: heads ${nh} must divide width ${c} and be divisible by cp ${cp}`);
  }
  if (qkv.size !== b * t * 3 * c) {
    throw new Error(`ulyssesAttention: qkv has shape [${qkv.shape}], expected [${b}, ${t}, ${3 * c}]`);
  }
  const heads = await seqToHeadAllToAll(tape, qkv, dims, 3, group);
  const z = flashAttention(tape, heads, { b, t: cp * t, c: c / cp, nh: nh / cp, causal: dims.causal ?? true }, label);
  return await headToSeqAllToAll(tape, z, dims, group);
}
