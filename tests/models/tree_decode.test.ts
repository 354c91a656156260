/**
 * Tree and ring decode across a context-parallel group (src/models/tree_decode.ts,
 * docs/design.md#tree-attention-decoding) on in-process ranks (src/comm/local.ts): every rank's output equals
 * single-rank decode attention over the whole cache (the GPU kernel, within the f32 bounds of
 * docs/design.md#test-tolerances, and the f64 reference) for cp 2, 3 and 4 on ragged context lengths, empty shards
 * included; each rank's traced bytes per (layer, token) equal decodeCombineBytes exactly.
 */
import { deepStrictEqual, equal, rejects } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { traceTotals } from '../../src/comm/trace.ts';
import { decodeAttention } from '../../src/kernels/decode_attention.ts';
import { decodeAttentionRef } from '../../src/reference/decode_attention.ts';
import {
  type DecodeCombine,
  decodeCombine,
  decodeCombineBytes,
  decodeShard,
  emptyPartial,
  shardedDecodeAttention,
} from '../../src/models/tree_decode.ts';
import type { Algorithm } from '../../src/comm/call_options.ts';

/** Positions start … start + len − 1 of every (b, h) row of a (B, nh, T, hs) cache, as (B, nh, len, hs). */
function shardOf(x: Float64Array, rows: number, t: number, hs: number, start: number, len: number): Float32Array {
  const out = new Float32Array(rows * len * hs);
  for (let r = 0; r < rows; r++) out.set(x.subarray((r * t + start) * hs, (r * t + start + len) * hs), r * len * hs);
  return out;
}

// [cp, B, nh, hs, T]: T not a multiple of cp (ragged shards), T < cp (an empty shard), scores ±8.
const CASES: [number, number, number, number, number][] = [
  [2, 1, 2, 16, 37],
  [2, 2, 3, 7, 2],
  [3, 2, 3, 16, 100],
  [3, 1, 1, 32, 2],
  [4, 1, 4, 64, 203],
  [4, 2, 2, 8, 6],
  [4, 1, 2, 16, 3],
];

for (const method of ['tree', 'ring'] as DecodeCombine[]) {
  for (const [cp, b, nh, hs, t] of CASES) {
    gpuTest(`${method} decode cp=${cp} B=${b} nh=${nh} hs=${hs} T=${t} equals single-rank decode`, async (gpu) => {
      const c = nh * hs, rows = b * nh, seed = cp * 100 + t;
      const k = randn(rows * t * hs, seed, -4, 4), v = randn(rows * t * hs, seed + 1);
      const qkv = randn(b * 3 * c, seed + 2, -2, 2);
      const tq = gpu.upload(Float32Array.from(qkv), [b, 1, 3 * c]);
      const tk = gpu.upload(Float32Array.from(k), [b, nh, t, hs]),
        tv = gpu.upload(Float32Array.from(v), [b, nh, t, hs]);
      const ty = gpu.zeros([b, 1, c]);
      decodeAttention(gpu, tq, tk, tv, ty, { b, c, nh, tMax: t }, t);
      const single = await gpu.read(ty);
      const ref = decodeAttentionRef(qkv, k, v, { b, c, nh, tMax: t, len: t });
      const world = localWorld(cp, { trace: true });
      try {
        const ys = await onEveryRank(world, async (comm) => {
          const { start, len } = decodeShard(t, cp, comm.rank);
          // An empty shard still gets a one-row cache (never read: no partial to compute).
          const tMax = Math.max(len, 1);
          const ks = gpu.upload(len ? shardOf(k, rows, t, hs, start, len) : new Float32Array(rows * hs), [
            b,
            nh,
            tMax,
            hs,
          ]);
          const vs = gpu.upload(len ? shardOf(v, rows, t, hs, start, len) : new Float32Array(rows * hs), [
            b,
            nh,
            tMax,
            hs,
          ]);
          try {
            return await shardedDecodeAttention(gpu, comm, tq, ks, vs, { b, c, nh, tMax }, len, method);
          } finally {
            ks.release();
            vs.release();
          }
        });
        for (const [r, y] of ys.entries()) {
          assertClose(y, single, `rank ${r} vs single-rank kernel`);
          assertRelRms(y, single, `rank ${r} vs single-rank kernel`);
          assertClose(y, ref, `rank ${r} vs f64 reference`);
        }
        const sent = traceTotals(world.flatMap((w) => w.tracer.spans)).bytesByRank;
        for (let r = 0; r < cp; r++) {
          equal(sent[r] ?? 0, decodeCombineBytes(method, { b, nh, hs }, cp, r), `rank ${r} bytes`);
        }
      } finally {
        closeLocalWorld(world);
        for (const x of [tq, tk, tv, ty]) x.release();
      }
    });
  }
}

Deno.test('decode combine bytes: tree sends lg p·B·nh·(hs+2) floats per rank on p = 2^k, ring (p−1)·B·nh·(hs+2)', async () => {
  const d = { b: 2, nh: 4, hs: 16 }, n = d.b * d.nh * (d.hs + 2);
  for (const p of [1, 2, 4, 8]) {
    for (let r = 0; r < p; r++) {
      equal(decodeCombineBytes('tree', d, p, r), 4 * Math.log2(p) * n);
      equal(decodeCombineBytes('ring', d, p, r), 4 * (p - 1) * n);
    }
  }
  // Other allReduce algorithms move what their traffic says, and the trace agrees (p = 3: a fold).
  for (const algorithm of ['ring', 'rabenseifner', 'binomial', 'recursive-doubling'] as Algorithm[]) {
    for (const p of [3, 4]) {
      const world = localWorld(p, { trace: true });
      const parts = [...Array(p)].map((_, r) =>
        Float32Array.from(randn(n, r + p), (x, i) => (i % 18 === 1 ? 1 + Math.abs(x) : x))
      );
      await onEveryRank(world, (comm) => decodeCombine('tree', comm, parts[comm.rank], d, { algorithm }));
      const sent = traceTotals(world.flatMap((w) => w.tracer.spans)).bytesByRank;
      deepStrictEqual(
        [...Array(p).keys()].map((r) => sent[r] ?? 0),
        [...Array(p).keys()].map((r) => decodeCombineBytes('tree', d, p, r, algorithm)),
        `${algorithm} p=${p}`,
      );
      closeLocalWorld(world);
    }
  }
});

Deno.test('decode combine refuses a context with no key and a partial of the wrong length', async () => {
  const d = { b: 1, nh: 2, hs: 4 };
  for (const method of ['tree', 'ring'] as DecodeCombine[]) {
    const world = localWorld(2);
    await rejects(
      onEveryRank(world, (comm) => decodeCombine(method, comm, emptyPartial(d), d)),
      /has no cached key in any shard/,
    );
    closeLocalWorld(world);
    const [one] = localWorld(1);
    await rejects(
      decodeCombine(method, one, new Float32Array(5), d),
      /the partial has 5 floats, expected B·nh·\(hs \+ 2\) = 12/,
    );
    closeLocalWorld([one]);
  }
  assertThrows(() => decodeShard(10, 0, 0), 'need integers t ≥ 0, p ≥ 1');
  deepStrictEqual([0, 1, 2].map((r) => decodeShard(7, 3, r)), [{ start: 0, len: 3 }, { start: 3, len: 2 }, {
    start: 5,
    len: 2,
  }]);
});
