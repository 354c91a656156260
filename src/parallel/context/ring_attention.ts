/**
 * Ring attention (Liu, Zaharia & Abbeel, arXiv 2310.01889) with zig-zag load balancing
 * (Brandon et al., Striped Attention arXiv 2311.09431; the design of zhuzilin/
 * ring-flash-attention `zigzag_ring_flash_attn.py`) over a context-parallel group of cp ranks.
 *
 * Layout: the sequence T is cut into 2cp chunks of T/(2cp) tokens; rank r holds chunks r and
 * 2cp−1−r, in that order, as its T/cp local rows. Causal work then balances: every rank's pair
 * of chunks sees the same number of (query, key) pairs.
 *
 * Forward: the rank's K, V block (B, T/cp, 2C) travels around the ring (rank r sends to r+1,
 * receives from r−1), cp−1 sends per call; at step i rank r holds the block of rank r−i and
 * folds every visible (query chunk, key chunk) pair into its running O and L with the block
 * kernel (flash_attention_block.ts), which is the LSE merge O = Σ e^{L_i − L} O_i.
 * Backward: D = rowsum(dO ∘ O); K, V travel around again (cp−1 sends) together with the
 * dK, dV accumulator of the block each rank holds (cp sends: the last one returns the summed
 * dK, dV to the block's owner); dQ accumulates locally.
 *
 * Elements sent per call and rank, with n = B·(T/cp)·C: forward 2n·(cp−1); backward
 * 2n·(cp−1) + 2n·cp. All messages are point-to-point sends on the group's p2p channel.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import {
  flashBlockBackward,
  type FlashBlockDims,
  flashBlockDsum,
  flashBlockForward,
} from '../../kernels/flash_attention_block.ts';

/** Local attention geometry: batch, the rank's T/cp rows, width C, heads. */
export interface RingDims {
  b: number;
  /** Rows this rank holds (T/cp; even). */
  t: number;
  c: number;
  nh: number;
  causal?: boolean;
}

/** The two chunks (of 2cp) that rank r of cp holds under zig-zag: [r, 2cp−1−r]. */
export function zigzagChunks(r: number, cp: number): [number, number] {
  if (!Number.isInteger(cp) || cp < 1 || !Number.isInteger(r) || r < 0 || r >= cp) {
    throw new Error(`zigzag: rank ${r} must be an integer in [0, cp = ${cp})`);
  }
  return [r, 2 * cp - 1 - r];
}

/**
 * Global positions of rank r's T/cp local rows under zig-zag (chunk r, then chunk 2cp−1−r).
 * @throws Error when T is not divisible by 2cp.
 */
export function zigzagPositions(r: number, cp: number, t: number): Int32Array {
  if (!Number.isInteger(t) || t < 1 || t % (2 * cp)) {
    throw new Error(`zig-zag ring attention: sequence ${t} is not divisible by 2·cp = ${2 * cp}`);
  }
  const n = t / (2 * cp), out = new Int32Array(2 * n);
  zigzagChunks(r, cp).forEach((c, k) => {
    for (let i = 0; i < n; i++) out[k * n + i] = c * n + i;
  });
  return out;
}

/** Checks dims against the group. @throws Error naming the violated rule. */
function checkRing(d: RingDims, qkv: Tensor): void {
  for (const k of ['b', 't', 'c', 'nh'] as const) {
    if (!Number.isInteger(d[k]) || d[k] < 1) {
      throw new Error(`ringAttention: dims.${k} must be a positive integer, got ${d[k]}`);
    }
  }
  if (d.t % 2) throw new Error(`ringAttention: local rows ${d.t} must be even (two zig-zag chunks)`);
  if (qkv.size !== d.b * d.t * 3 * d.c) {
    throw new Error(`ringAttention: qkv has shape [${qkv.shape}], expected [${d.b}, ${d.t}, ${3 * d.c}]`);
  }
}

/** K and V of every row of a (B·T, 3C) host array, packed as (B·T, 2C). */
function packKV(qkv: Float32Array, rows: number, c: number): Float32Array {
  const out = new Float32Array(rows * 2 * c);
  for (let r = 0; r < rows; r++) out.set(qkv.subarray(r * 3 * c + c, r * 3 * c + 3 * c), r * 2 * c);
  return out;
}

/** Encodes fn(dims) for every visible (local query chunk, source key chunk) pair. */
function eachPair(d: RingDims, r: number, src: number, cp: number, fn: (dims: FlashBlockDims) => void): void {
  const n = d.t / 2, mine = zigzagChunks(r, cp), theirs = zigzagChunks(src, cp), causal = d.causal ?? true;
  for (let qi = 0; qi < 2; qi++) {
    for (let ki = 0; ki < 2; ki++) {
      if (causal && theirs[ki] > mine[qi]) continue; // every key after every query: nothing visible
      fn({
        b: d.b,
        c: d.c,
        nh: d.nh,
        causal,
        q: { rows: d.t, first: qi * n, n, pos: mine[qi] * n },
        kv: { rows: d.t, first: ki * n, n, pos: theirs[ki] * n },
        kvLayout: { width: 2 * d.c, offset: 0 },
      });
    }
  }
}

const KV_TAG = 41, DKV_TAG = 42;

/**
 * Zig-zag ring attention of this rank's qkv (B, T/cp, 3C) (rows in zig-zag order, see
 * {@link zigzagPositions}) as one autograd op: returns y (B, T/cp, C), recorded as a
 * `collective` node whose backward runs the ring backward (so the tape needs backwardAsync).
 * Every rank of `group` must call it with the same dims in the same order.
 * @throws Error (rejects) on bad dims (local rows odd, sizes inconsistent) or a failed exchange.
 */
export async function ringAttention(
  tape: Tape,
  qkv: Tensor,
  dims: RingDims,
  group: FloatCollectives,
  label = 'ring_attn',
): Promise<Tensor> {
  checkRing(dims, qkv);
  const gpu = tape.gpu, { b, t, c, nh } = dims, cp = group.size, r = group.rank;
  const next = (r + 1) % cp, prev = (r + cp - 1) % cp, rows = b * t;
  const y = tape.alloc([b, t, c], label);
  const lse = gpu.upload(new Float32Array(b * nh * t).fill(-1e30), [b, nh, t], 'f32', `${label}.lse`);
  tape.onDispose(() => lse.release());
  gpu.clear(y);
  let kvHost = packKV(await gpu.read(qkv) as Float32Array, rows, c);
  const kv = gpu.upload(kvHost, [b, t, 2 * c], 'f32', `${label}.kv`);
  try {
    for (let i = 0; i < cp; i++) {
      if (i < cp - 1) await group.send(kvHost, next, { tag: KV_TAG });
      eachPair(dims, r, (r - i + cp) % cp, cp, (d) => flashBlockForward(gpu, qkv, kv, y, lse, d, { accumulate: true }));
      if (i < cp - 1) gpu.write(kv, kvHost = await group.recv(new Float32Array(kvHost.length), prev, { tag: KV_TAG }));
    }
  } finally {
    kv.release();
  }
  tape.record(
    {
      op: 'collective',
      x: qkv,
      y,
      name: label,
      backward: (dy) => ringBackward(gpu, qkv, y, lse, dy, dims, group),
    },
    [qkv],
    [y],
  );
  return y;
}

/** dqkv (B·T/cp·3C, host) of the ring: dQ locally, dK and dV summed around the ring back to their owner. */
async function ringBackward(
  gpu: Gpu,
  qkv: Tensor,
  y: Tensor,
  lse: Tensor,
  dyHost: Float32Array,
  dims: RingDims,
  group: FloatCollectives,
): Promise<Float32Array> {
  const { b, t, c, nh } = dims, cp = group.size, r = group.rank, rows = b * t;
  const next = (r + 1) % cp, prev = (r + cp - 1) % cp;
  const whole: FlashBlockDims = {
    b,
    c,
    nh,
    q: { rows: t, first: 0, n: t, pos: 0 },
    kv: { rows: t, first: 0, n: t, pos: 0 },
  };
  const dy = gpu.upload(dyHost, [b, t, c], 'f32', 'ring.dy');
  const dsum = gpu.empty([b, nh, t], 'f32', 'ring.D');
  const dqkv = gpu.zeros([b, t, 3 * c], 'f32', 'ring.dqkv');
  let kvHost = packKV(await gpu.read(qkv) as Float32Array, rows, c);
  const kv = gpu.upload(kvHost, [b, t, 2 * c], 'f32', 'ring.kv');
  const dkv = gpu.empty([b, t, 2 * c], 'f32', 'ring.dkv');
  try {
    flashBlockDsum(gpu, y, dy, dsum, whole);
    let own: Float32Array | null = null;
    for (let i = 0; i < cp; i++) {
      if (i < cp - 1) await group.send(kvHost, next, { tag: KV_TAG });
      // The accumulator of the block held now: empty at step 0, else what the previous rank summed.
      if (i === 0) gpu.clear(dkv);
      else gpu.write(dkv, await group.recv(new Float32Array(rows * 2 * c), prev, { tag: DKV_TAG }));
      eachPair(dims, r, (r - i + cp) % cp, cp, (d) => {
        flashBlockBackward(gpu, qkv, kv, dy, lse, dsum, { dq: dqkv, dkv, dkvLayout: { width: 2 * c, offset: 0 } }, d);
      });
      const acc = await gpu.read(dkv) as Float32Array;
      if (cp === 1) own = acc;
      else await group.send(acc, next, { tag: DKV_TAG });
      if (i < cp - 1) gpu.write(kv, kvHost = await group.recv(new Float32Array(kvHost.length), prev, { tag: KV_TAG }));
    }
    own ??= await group.recv(new Float32Array(rows * 2 * c), prev, { tag: DKV_TAG });
    const dx = await gpu.read(dqkv) as Float32Array;
    for (let i = 0; i < rows; i++) dx.set(own.subarray(i * 2 * c, (i + 1) * 2 * c), i * 3 * c + c);
    return dx;
  } finally {
    for (const x of [dy, dsum, dqkv, kv, dkv]) x.release();
  }
}
