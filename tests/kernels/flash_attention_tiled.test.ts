// The shared-memory tiled FlashAttention-2 kernels (what GPUs run), forced on the CPU adapter
// with flashTuning.forceTiled and checked against the f64 references; forward and backward in
// both variants, workgroup-memory tiles and subgroup shuffles (where the adapter has subgroups:
// Dawn on SwiftShader, where a missing feature fails the run; not Deno's wgpu on lavapipe).
import { gpuTest } from '../util/gpu.ts';
import { dispatchedKeys, subgroupTest, subgroupVariantTest } from '../util/row_variants.ts';
import { checkNoQuadraticAllocation } from './flash_pool.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import {
  CPU_LOOP_BUDGET,
  FLASH_MAX_BC,
  FLASH_MIN_WORKGROUPS,
  flashAttentionBackward,
  flashAttentionForward,
  flashTiledCpuChunk,
  flashTiledLoopTrips,
  flashTiles,
  flashTilesFor,
  flashTuning,
} from '../../src/kernels/flash_attention.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';

type Tuning = { storageBytes: number | null; chunk: number | null; br: number | null };

/** Runs `fn` with the tiled kernels forced and the tile-size, chunk and Br overrides of `tune` (null: automatic). */
async function tiled(gpu: Gpu, tune: Tuning, fn: () => Promise<void>) {
  Object.assign(flashTuning, { forceTiled: true, ...tune });
  try {
    if (flashTilesFor(gpu, 64) === null) {
      throw new Error('forceTiled did not select the tiled kernels');
    }
    await fn();
  } finally {
    Object.assign(flashTuning, { forceTiled: false, storageBytes: null, chunk: null, br: null });
  }
}

/** Channels lo … lo+C of every token row of a (B·T, 3C) array: dq (0), dk (C) or dv (2C). */
function part(a: ArrayLike<number>, rows: number, c: number, lo: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < rows; r++) for (let i = 0; i < c; i++) out.push(a[r * 3 * c + lo + i]);
  return out;
}

/**
 * Runs the backward, and throws unless its dQ and dK/dV pipelines are all of `variant` (pipeline
 * keys ending in '.sg' for subgroups): the variant test only asks that some pipeline was.
 */
async function backwardOf(gpu: Gpu, variant: string, fn: () => void): Promise<void> {
  const keys = [...new Set(await dispatchedKeys(gpu, fn))].filter((k) => /\.(dq|dkv)_tiled\./.test(k));
  const want = variant === 'subgroup';
  if (keys.length !== 2 || keys.some((k) => k.endsWith('.sg') !== want)) {
    throw new Error(`${variant} backward ran ${keys.join(', ')}`);
  }
}

/** Forward and backward of one case against the f64 references, accumulating onto pre-filled dqkv. */
async function checkCase(
  gpu: Gpu,
  variant: string,
  b: number,
  t: number,
  nh: number,
  hs: number,
  causal: boolean,
  range: number,
) {
  const c = nh * hs;
  const d = { b, t, c, nh, causal };
  const seed = b * 1000 + t * 10 + nh + hs + (causal ? 7 : 0);
  const qkv = randn(b * t * 3 * c, seed, -range, range);
  const dy = randn(b * t * c, seed + 1);
  const pre = randn(b * t * 3 * c, seed + 2);
  const ref = attentionForwardRef(qkv, d);
  const dref = attentionBackwardRef(qkv, ref.att, dy, d);
  const tqkv = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
  const tdy = gpu.upload(Float32Array.from(dy), [b, t, c]);
  // Outputs start as NaN: every element must be written.
  const ty = gpu.upload(new Float32Array(b * t * c).fill(NaN), [b, t, c]);
  const tlse = gpu.upload(new Float32Array(b * nh * t).fill(NaN), [b, nh, t]);
  const tdqkv = gpu.upload(Float32Array.from(pre), [b, t, 3 * c]);
  flashAttentionForward(gpu, tqkv, ty, tlse, d);
  assertClose(await gpu.read(ty), ref.y, 'y');
  assertClose(await gpu.read(tlse), ref.lse, 'lse');
  await backwardOf(gpu, variant, () => flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d));
  const got = await gpu.read(tdqkv);
  const delta = Float64Array.from(got, (v, i) => v - pre[i]);
  assertClose(got, dref.map((v, i) => v + pre[i]), 'dqkv (accumulated onto pre-filled)');
  assertClose(delta, dref, 'dqkv');
  for (const [name, lo] of [['dq', 0], ['dk', c], ['dv', 2 * c]] as const) {
    if (t > 1 || name === 'dv') {
      assertRelRms(part(delta, b * t, c, lo), part(dref, b * t, c, lo), name);
    }
  }
  for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
}

// [B, T, nh, hs, causal, storage budget, chunk, Br, |qkv| range] (null: automatic). T of
// {1, 17, 63, 113, 257} against Br = 16 (what small B·nh·T get), 32 and 64 (partial blocks;
// 257 = four blocks of 64 and one row) and Bc = 32/32/16 at hs 32/64/128 under the default
// 16 KiB; hs = 7 (masked last vec4); chunks that are no multiple of Bc (tiles cut at chunk
// boundaries, O/m/ℓ carried over); the device's own budget once; odd head sizes 13 and 33 on
// ragged T (a last vec4 of one channel; subgroup steps cut by T and by a chunk's end).
type Case = [
  number,
  number,
  number,
  number,
  boolean,
  number | null,
  number | null,
  number | null,
  number,
];
const CASES: Case[] = [
  [1, 1, 1, 32, true, 16384, null, null, 2],
  [2, 17, 2, 64, false, 16384, null, null, 2],
  [1, 63, 1, 128, true, 16384, null, 64, 2],
  [1, 113, 2, 32, false, 16384, null, 32, 2],
  [1, 257, 1, 64, true, 16384, null, 64, 2],
  [1, 257, 1, 128, false, 16384, null, null, 2],
  [2, 17, 3, 7, true, 16384, null, null, 2],
  [1, 33, 2, 32, true, 16384, null, null, 8],
  [1, 63, 2, 64, true, null, null, null, 2],
  [1, 113, 1, 64, true, 16384, 20, null, 4],
  [2, 63, 1, 32, false, 16384, 12, 32, 4],
  [2, 45, 2, 13, false, 16384, null, 16, 2],
  [1, 70, 1, 33, true, 16384, 28, null, 2],
];
for (const [b, t, nh, hs, causal, storageBytes, chunk, br, range] of CASES) {
  await subgroupVariantTest(
    `tiled flash attention B=${b} T=${t} nh=${nh} hs=${hs} causal=${causal} storage=${storageBytes ?? 'device'} chunk=${
      chunk ?? 'default'
    } Br=${br ?? 'auto'}`,
    flashTuning,
    'workgroup memory',
    (gpu, variant) =>
      tiled(gpu, { storageBytes, chunk, br }, () => checkCase(gpu, variant, b, t, nh, hs, causal, range)),
  );
}

// The backward's two variants on the same y and L. Without an online softmax both add the same
// products in the same order, yet a compiler may contract or reorder each pipeline its own way,
// so they are held to the f32 bounds of docs/design.md#test-tolerances rather than to equal bits.
const PAIRS = [[1, 257, 2, 64, true, 64], [2, 45, 2, 13, false, 16], [1, 70, 1, 33, true, null]] as const;
for (const [b, t, nh, hs, causal, br] of PAIRS) {
  await subgroupTest(
    `tiled flash backward: subgroup variant matches workgroup memory (T=${t} hs=${hs} causal=${causal})`,
    (gpu) =>
      tiled(gpu, { storageBytes: 16384, chunk: null, br }, async () => {
        const c = nh * hs;
        const d = { b, t, c, nh, causal };
        const tqkv = gpu.upload(Float32Array.from(randn(b * t * 3 * c, t + hs, -2, 2)), [b, t, 3 * c]);
        const tdy = gpu.upload(Float32Array.from(randn(b * t * c, t + hs + 1)), [b, t, c]);
        const [ty, tlse] = [gpu.empty([b, t, c]), gpu.empty([b, nh, t])];
        flashAttentionForward(gpu, tqkv, ty, tlse, d);
        const grads: ArrayLike<number>[] = [];
        for (const variant of ['workgroup memory', 'subgroup']) {
          const tdqkv = gpu.zeros([b, t, 3 * c]);
          flashTuning.subgroups = variant === 'subgroup';
          try {
            await backwardOf(gpu, variant, () => flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d));
          } finally {
            flashTuning.subgroups = true;
          }
          grads.push(await gpu.read(tdqkv));
          tdqkv.release();
        }
        assertClose(grads[1], grads[0], 'dqkv, subgroup vs workgroup memory');
        assertRelRms(grads[1], grads[0], 'dqkv, subgroup vs workgroup memory');
        for (const x of [tqkv, tdy, ty, tlse]) x.release();
      }),
  );
}

gpuTest(
  'tiled flash attention over two default CPU chunks (hs=128, closed form)',
  (gpu) =>
    tiled(gpu, { storageBytes: 16384, chunk: null, br: null }, async () => {
      // q = k = 0: every row attends uniformly to the keys it sees, so with v_s = s and dO = 1:
      // y_t = t/2, L_t = log(t+1), dV_s = Σ_{t≥s} 1/(t+1), dQ = dK = 0. The first dispatch of
      // each kernel streams a full chunk: a miscounted loop budget would cut it off on lavapipe.
      const hs = 128;
      // Br is automatic: 16 for these few rows (B·nh·T < 16·FLASH_MIN_WORKGROUPS).
      const tiles = flashTilesFor(gpu, hs, 1)!;
      const t = flashTiledCpuChunk(hs, tiles) + 37;
      const c = hs;
      const d = { b: 1, t, c, nh: 1, causal: true };
      const qkv = new Float32Array(t * 3 * c);
      for (let s = 0; s < t; s++) qkv.fill(s, s * 3 * c + 2 * c, (s + 1) * 3 * c);
      const tqkv = gpu.upload(qkv, [1, t, 3 * c]);
      const tdy = gpu.upload(new Float32Array(t * c).fill(1), [1, t, c]);
      const ty = gpu.empty([1, t, c]);
      const tlse = gpu.empty([1, 1, t]);
      const tdqkv = gpu.zeros([1, t, 3 * c]);
      flashAttentionForward(gpu, tqkv, ty, tlse, d);
      flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
      const [y, lse, g] = [await gpu.read(ty), await gpu.read(tlse), await gpu.read(tdqkv)];
      const rows = Array.from({ length: t }, (_, i) => i);
      assertClose(y, rows.flatMap((i) => new Array(c).fill(i / 2)), 'y');
      assertClose(lse, rows.map((i) => Math.log(i + 1)), 'lse');
      const suffix = new Float64Array(t + 1);
      for (let i = t - 1; i >= 0; i--) suffix[i] = suffix[i + 1] + 1 / (i + 1);
      const dv = rows.flatMap((s) => Array.from(g.subarray(s * 3 * c + 2 * c, (s + 1) * 3 * c)));
      assertClose(dv, rows.flatMap((s) => new Array(c).fill(suffix[s])), 'dv');
      const dqk = rows.flatMap((s) => Array.from(g.subarray(s * 3 * c, s * 3 * c + 2 * c)));
      assertClose(dqk, new Float64Array(dqk.length), 'dq, dk');
      for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
    }),
);

gpuTest(
  'tiled flash attention allocates nothing of size T×T (T=257, pool accounting)',
  (gpu) => tiled(gpu, { storageBytes: null, chunk: null, br: null }, () => checkNoQuadraticAllocation(gpu)),
);

Deno.test('flashTiles: tiles fit the workgroup-storage budget and are the largest that do', () => {
  // docs/design.md#flashattention-2: at d = 64 in f32 the 16 KiB default allows Bc = 32, and no Bc exceeds
  // FLASH_MAX_BC (32) however much storage the device has.
  const want: [number, number, number][] = [[32, 16384, 32], [64, 16384, 32], [64, 49152, 32], [128, 49152, 32], [
    128,
    16384,
    16,
  ], [
    64,
    4096,
    8,
  ], [128, 1024, 1]];
  for (const [hs, limit, bc] of want) {
    const t = flashTiles(hs, limit);
    if (t.bc !== bc || t.br !== 64) {
      throw new Error(`hs=${hs} limit=${limit}: got Bc=${t.bc} Br=${t.br}, want ${bc}, 64`);
    }
  }
  for (const limit of [1024, 3000, 4096, 10000, 16384, 32768, 65536]) {
    for (const hs of [7, 32, 64, 128]) {
      const t = flashTiles(hs, limit);
      const row = 2 * Math.ceil(hs / 4) * 16;
      if (t.bytes !== t.bc * row || t.bytes > limit) {
        throw new Error(`hs=${hs}: ${t.bytes} B of tiles over ${limit}`);
      }
      if (t.bc < FLASH_MAX_BC && 2 * t.bc * row <= limit) {
        throw new Error(`hs=${hs} limit=${limit}: Bc=${t.bc} could double`);
      }
      // The CPU chunk keeps the busiest invocation under the budget, and one more tile would not.
      const chunk = flashTiledCpuChunk(hs, t);
      const trips = (n: number) => flashTiledLoopTrips(n, hs, t);
      if (
        chunk % t.bc !== 0 || trips(chunk) > CPU_LOOP_BUDGET ||
        trips(chunk + t.bc) <= CPU_LOOP_BUDGET
      ) {
        throw new Error(`chunk ${chunk}`);
      }
    }
  }
  if (flashTiles(64, 16384, 32).br !== 32) {
    throw new Error('Br must respect maxComputeInvocationsPerWorkgroup');
  }
  // Br halves (down to 16) while the rows would not fill FLASH_MIN_WORKGROUPS workgroups.
  for (
    const [rows, br] of [[1, 16], [FLASH_MIN_WORKGROUPS * 32, 32], [FLASH_MIN_WORKGROUPS * 64, 64]]
  ) {
    const got = flashTiles(64, 16384, 256, rows).br;
    if (got !== br) throw new Error(`rows=${rows}: Br=${got}, want ${br}`);
  }
  assertThrows(() => flashTiles(128, 512), 'maxComputeWorkgroupStorageSize');
  assertThrows(() => flashTiles(0, 16384), 'hs must be a positive integer');
});

gpuTest('tiled flash attention rejects a Br override other than 16, 32 or 64', async (gpu) => {
  const d = { b: 1, t: 4, c: 8, nh: 2 };
  const [qkv, y, lse] = [gpu.zeros([1, 4, 24]), gpu.zeros([1, 4, 8]), gpu.zeros([1, 2, 4])];
  Object.assign(flashTuning, { forceTiled: true, br: 48 });
  try {
    assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, d), 'must be 16, 32 or 64, got 48');
  } finally {
    Object.assign(flashTuning, { forceTiled: false, br: null });
  }
  for (const x of [qkv, y, lse]) x.release();
  await gpu.sync();
});
