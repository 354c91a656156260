import { gpuTest } from '../util/gpu.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import {
  flashBlockBackward,
  type FlashBlockDims,
  flashBlockDsum,
  flashBlockForward,
  flashBlockTuning,
} from '../../src/kernels/flash_attention_block.ts';
import {
  attentionBackwardRef,
  attentionForwardRef,
  type AttentionRefDims,
  blockAttentionBackwardRef,
  blockAttentionForwardRef,
  mergeAttentionRef,
  type RefBlock,
} from '../../src/reference/attention.ts';

/** Splits T rows into consecutive blocks of the given sizes. */
function blocks(sizes: number[]): RefBlock[] {
  let first = 0;
  return sizes.map((n) => ({ first: (first += n) - n, n }));
}

/** Rows [first, first+n) of a (B, T, w) array, as (B, n, w). */
function rowsOf(a: ArrayLike<number>, b: number, t: number, w: number, blk: RefBlock): Float64Array {
  const out = new Float64Array(b * blk.n * w);
  for (let i = 0; i < b; i++) {
    for (let r = 0; r < blk.n; r++) {
      for (let x = 0; x < w; x++) out[(i * blk.n + r) * w + x] = a[(i * t + blk.first + r) * w + x];
    }
  }
  return out;
}

/** Rows of a (B, nh, T) array, as (B, nh, n). */
function headRowsOf(a: ArrayLike<number>, bh: number, t: number, blk: RefBlock): Float64Array {
  const out = new Float64Array(bh * blk.n);
  for (let i = 0; i < bh; i++) for (let r = 0; r < blk.n; r++) out[i * blk.n + r] = a[i * t + blk.first + r];
  return out;
}

/** Merged block forward: each query block's partials over every key block, merged by LSE. */
function mergedForward(
  qkv: Float64Array,
  d: AttentionRefDims,
  parts: RefBlock[],
): { y: Float64Array; lse: Float64Array } {
  const { b, t, c, nh } = d;
  const y = new Float64Array(b * t * c), lse = new Float64Array(b * nh * t);
  for (const q of parts) {
    const m = mergeAttentionRef(parts.map((kv) => blockAttentionForwardRef(qkv, d, q, kv)), d, q.n);
    for (let i = 0; i < b; i++) {
      for (let r = 0; r < q.n; r++) {
        for (let x = 0; x < c; x++) y[(i * t + q.first + r) * c + x] = m.o[(i * q.n + r) * c + x];
      }
    }
    for (let i = 0; i < b * nh; i++) for (let r = 0; r < q.n; r++) lse[i * t + q.first + r] = m.lse[i * q.n + r];
  }
  return { y, lse };
}

function dsumRef(y: Float64Array, dy: Float64Array, d: AttentionRefDims): Float64Array {
  const { b, t, c, nh } = d, hs = c / nh, out = new Float64Array(b * nh * t);
  for (let i = 0; i < b; i++) {
    for (let h = 0; h < nh; h++) {
      for (let r = 0; r < t; r++) {
        let s = 0;
        for (let x = 0; x < hs; x++) s += y[(i * t + r) * c + h * hs + x] * dy[(i * t + r) * c + h * hs + x];
        out[(i * nh + h) * t + r] = s;
      }
    }
  }
  return out;
}

function blockwiseBackward(qkv: Float64Array, dy: Float64Array, d: AttentionRefDims, parts: RefBlock[]): Float64Array {
  const { y, lse } = mergedForward(qkv, d, parts);
  const D = dsumRef(y, dy, d), g = new Float64Array(qkv.length);
  for (const q of parts) {
    for (const kv of parts) blockAttentionBackwardRef(qkv, dy, lse, D, d, q, kv).forEach((v, i) => (g[i] += v));
  }
  return g;
}

for (const causal of [true, false]) {
  Deno.test(`block reference (causal ${causal}): merged blocks equal full attention; backward checked by finite differences`, () => {
    const d = { b: 2, t: 10, c: 6, nh: 2, causal };
    const parts = blocks([3, 4, 3]);
    const qkv = randn(d.b * d.t * 3 * d.c, 11), dy = randn(d.b * d.t * d.c, 12);
    const full = attentionForwardRef(qkv, d);
    const m = mergedForward(qkv, d, parts);
    assertClose(m.y, full.y, 'merged y', 1e-12, 1e-10);
    assertClose(m.lse, full.lse, 'merged lse', 1e-12, 1e-10);
    const g = blockwiseBackward(qkv, dy, d, parts);
    assertClose(g, attentionBackwardRef(qkv, full.att, dy, d), 'blockwise dqkv', 1e-12, 1e-10);
    assertFiniteDiff((x) => dot(mergedForward(x, d, parts).y, dy), qkv, g, 'blockwise dqkv vs finite differences');
  });
}

// [B, T, nh, hs, causal, chunk sizes, streamed rows per dispatch]
const CASES: [number, number, number, number, boolean, number[], number | null][] = [
  [2, 16, 2, 16, true, [8, 8], null],
  [1, 13, 2, 16, true, [4, 3, 6], null],
  [2, 19, 3, 7, false, [5, 5, 4, 5], null],
  [1, 19, 1, 32, true, [2, 9, 3, 5], 3],
];

/** GPU block kernels against the references: partials merged, accumulated folds, and the backward. */
async function checkGpu(gpu: Gpu, [b, t, nh, hs, causal, sizes, chunk]: (typeof CASES)[number]): Promise<void> {
  const c = nh * hs, d = { b, t, c, nh, causal }, parts = blocks(sizes), seed = t * 7 + hs;
  const qkv = randn(b * t * 3 * c, seed, -2, 2), dy = randn(b * t * c, seed + 1);
  const full = attentionForwardRef(qkv, d);
  // K and V packed on their own (B, T, 2C), as ring attention sends them.
  const kvHost = new Float32Array(b * t * 2 * c);
  for (let r = 0; r < b * t; r++) for (let x = 0; x < 2 * c; x++) kvHost[r * 2 * c + x] = qkv[r * 3 * c + c + x];
  const qkvT = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
  const kvT = gpu.upload(kvHost, [b, t, 2 * c]);
  const o = gpu.zeros([b, t, c]),
    lse = gpu.zeros([b, nh, t]),
    oAcc = gpu.zeros([b, t, c]),
    lAcc = gpu.zeros([b, nh, t]);
  const dims = (q: RefBlock, kv: RefBlock): FlashBlockDims => ({
    b,
    c,
    nh,
    causal,
    q: { rows: t, first: q.first, n: q.n, pos: q.first },
    kv: { rows: t, first: kv.first, n: kv.n, pos: kv.first },
    kvLayout: { width: 2 * c, offset: 0 },
  });
  flashBlockTuning.chunk = chunk;
  try {
    for (const q of parts) {
      const partials: { o: Float64Array; lse: Float64Array }[] = [];
      for (const [j, kv] of parts.entries()) {
        flashBlockForward(gpu, qkvT, kvT, o, lse, dims(q, kv));
        flashBlockForward(gpu, qkvT, kvT, oAcc, lAcc, dims(q, kv), { accumulate: j > 0 });
        partials.push({ o: rowsOf(await gpu.read(o), b, t, c, q), lse: headRowsOf(await gpu.read(lse), b * nh, t, q) });
        const ref = blockAttentionForwardRef(qkv, d, q, kv);
        assertClose(partials[j].o, ref.o, `partial O of q ${q.first}+${q.n}, kv ${kv.first}+${kv.n}`);
      }
      const merged = mergeAttentionRef(partials, d, q.n);
      assertClose(merged.o, rowsOf(full.y, b, t, c, q), `merged partials, q block at ${q.first}`);
      assertClose(merged.lse, headRowsOf(full.lse, b * nh, t, q), `merged L, q block at ${q.first}`);
    }
    assertClose(await gpu.read(oAcc), full.y, 'accumulated O');
    assertClose(await gpu.read(lAcc), full.lse, 'accumulated L');

    // Backward: global L and D, every pair accumulating onto pre-filled gradients.
    const dyT = gpu.upload(Float32Array.from(dy), [b, t, c]), D = gpu.zeros([b, nh, t]);
    flashBlockDsum(gpu, oAcc, dyT, D, { ...dims(parts[0], parts[0]), q: { rows: t, first: 0, n: t, pos: 0 } });
    const dRef = dsumRef(full.y, dy, d);
    assertClose(await gpu.read(D), dRef, 'D = rowsum(dO ∘ O)');
    const dqInit = randn(b * t * 3 * c, seed + 2), dkvInit = randn(b * t * 2 * c, seed + 3);
    const dq = gpu.upload(Float32Array.from(dqInit), [b, t, 3 * c]),
      dkv = gpu.upload(Float32Array.from(dkvInit), [b, t, 2 * c]);
    for (const q of parts) {
      for (const kv of parts) {
        flashBlockBackward(
          gpu,
          qkvT,
          kvT,
          dyT,
          lAcc,
          D,
          { dq, dkv, dkvLayout: { width: 2 * c, offset: 0 } },
          dims(q, kv),
        );
      }
    }
    const g = attentionBackwardRef(qkv, full.att, dy, d);
    const gq = await gpu.read(dq), gkv = await gpu.read(dkv);
    // Channels [lo, lo+C) of every row of a (B·T, w) array minus its initial value, vs the reference's channels [rlo, rlo+C).
    const delta = (a: ArrayLike<number>, init: ArrayLike<number>, w: number, lo: number, rlo: number, what: string) => {
      const got: number[] = [], want: number[] = [];
      for (let r = 0; r < b * t; r++) {
        for (let x = 0; x < c; x++) {
          got.push(a[r * w + lo + x] - init[r * w + lo + x]);
          want.push(g[r * 3 * c + rlo + x]);
        }
      }
      assertRelRms(got, want, what);
    };
    delta(gq, dqInit, 3 * c, 0, 0, 'dQ');
    delta(gkv, dkvInit, 2 * c, 0, c, 'dK');
    delta(gkv, dkvInit, 2 * c, c, 2 * c, 'dV');
    for (const x of [dyT, D, dq, dkv]) x.release();
  } finally {
    flashBlockTuning.chunk = null;
    for (const x of [qkvT, kvT, o, lse, oAcc, lAcc]) x.release();
  }
}

for (const cs of CASES) {
  gpuTest(
    `flash block attention B${cs[0]} T${cs[1]} nh${cs[2]} hs${cs[3]} causal ${cs[4]} chunks [${cs[5]}]${
      cs[6] ? ` streamed ${cs[6]} rows/dispatch` : ''
    }`,
    (gpu) => checkGpu(gpu, cs),
  );
}

gpuTest('flash block attention rejects inconsistent blocks and layouts', async (gpu) => {
  const qkv = gpu.zeros([1, 8, 24]), o = gpu.zeros([1, 8, 8]), lse = gpu.zeros([1, 2, 8]);
  const base: FlashBlockDims = {
    b: 1,
    c: 8,
    nh: 2,
    q: { rows: 8, first: 0, n: 8, pos: 0 },
    kv: { rows: 8, first: 0, n: 8, pos: 0 },
  };
  assertThrows(
    () => flashBlockForward(gpu, qkv, qkv, o, lse, { ...base, q: { rows: 8, first: 4, n: 8, pos: 0 } }),
    'past the tensor',
  );
  assertThrows(
    () => flashBlockForward(gpu, qkv, qkv, o, lse, { ...base, kv: { rows: 8, first: 0, n: 8, pos: -1 } }),
    'kv.pos must be',
  );
  assertThrows(
    () => flashBlockForward(gpu, qkv, qkv, o, lse, { ...base, kvLayout: { width: 24, offset: 12 } }),
    'do not fit',
  );
  assertThrows(() => flashBlockForward(gpu, qkv, qkv, o, lse, { ...base, c: 9 }), 'not divisible');
  assertThrows(
    () => flashBlockBackward(gpu, qkv, qkv, o, lse, lse, { dq: qkv, dkv: null }, base),
    'share one GPUBuffer',
  );
  assertThrows(() => flashBlockBackward(gpu, qkv, qkv, o, lse, lse, { dq: o, dkv: null }, base), 'dq has shape');
  await Promise.resolve();
  for (const x of [qkv, o, lse]) x.release();
});
