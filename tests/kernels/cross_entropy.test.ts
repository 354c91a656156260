import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, randn, rng } from '../util/assert.ts';
import { crossEntropyBackward, crossEntropyForward } from '../../src/kernels/cross_entropy.ts';
import { crossEntropyBackwardRef, crossEntropyRef } from '../../src/reference/cross_entropy.ts';
import { rowTuning } from '../../src/kernels/reduce.ts';
import { RAGGED_ROWS, rowVariantTest, VARIANT_LANES } from '../util/row_variants.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Targets in [0, v), a fraction `ignored` of them replaced by -1 or -100 (both mean "ignore"). */
function makeTargets(n: number, v: number, seed: number, ignored = 0.25): Int32Array {
  const r = rng(seed);
  return Int32Array.from(
    { length: n },
    () => (r() < ignored ? (r() < 0.5 ? -1 : -100) : Math.floor(r() * v)),
  );
}

Deno.test('cross-entropy reference backward matches finite differences', () => {
  const n = 5, v = 6, scale = 0.7;
  const z = randn(n * v, 1, -3, 3);
  const t = Int32Array.from([2, -1, 0, 5, -100]);
  const g = crossEntropyBackwardRef(z, t, n, v, scale);
  assertFiniteDiff((x) => scale * crossEntropyRef(x, t, n, v).loss, z, g, 'dlogits', {
    samples: 100,
  });
  // An ignored row has no gradient, and its logits do not change the loss.
  for (let i = v; i < 2 * v; i++) if (g[i] !== 0) throw new Error('ignored row got a gradient');
});

/** Forward + backward on the GPU vs the reference; dlogits pre-filled with `fill`. */
async function check(
  gpu: Gpu,
  n: number,
  v: number,
  {
    lo = -4,
    hi = 4,
    ignored = 0.25,
    scale = 1,
    fill = 0.5,
    seed = 1,
    z = undefined as Float64Array | undefined,
    t = undefined as Int32Array | undefined,
  } = {},
) {
  const logits = z ?? randn(n * v, seed, lo, hi);
  const targets = t ?? makeTargets(n, v, seed + 1, ignored);
  const what = `N=${n} V=${v}`;
  const tz = gpu.upload(Float32Array.from(logits), [n, v]);
  const tt = gpu.upload(targets, [n], 'i32');
  const tlse = gpu.empty([n]), tloss = gpu.empty([2]);
  crossEntropyForward(gpu, tz, tt, tlse, tloss);
  const ref = crossEntropyRef(logits, targets, n, v);
  assertClose(await gpu.read(tlse), ref.lse, `${what} lse`);
  const loss = await gpu.read(tloss);
  assertClose(loss, [ref.loss, ref.count], `${what} loss`);

  const td = gpu.upload(new Float32Array(n * v).fill(fill), [n, v]);
  crossEntropyBackward(gpu, tz, tt, tlse, tloss, td, scale);
  const got = await gpu.read(td);
  const g = crossEntropyBackwardRef(logits, targets, n, v, scale);
  assertClose(got, g.map((x) => x + fill), `${what} dlogits`);
  assertRelRms(got.map((x) => x - fill), g, `${what} dlogits`);
  // Ignored rows are untouched, bit for bit.
  for (let r = 0; r < n; r++) {
    if (targets[r] >= 0) continue;
    for (let i = 0; i < v; i++) {
      if (got[r * v + i] !== Math.fround(fill)) {
        throw new Error(`${what}: ignored row ${r} changed at ${i}: ${got[r * v + i]}`);
      }
    }
  }
  for (const x of [tz, tt, tlse, tloss, td]) x.release();
}

gpuTest('cross-entropy forward/backward on ragged shapes', async (gpu) => {
  for (const n of [1, 7, 63, 65, 257]) {
    for (const v of [1, 65, 257, 5003]) {
      if (n * v > 400_000) continue; // 257 × 5003 alone would cost seconds on a CPU adapter
      await check(gpu, n, v, { seed: n * 7919 + v });
    }
  }
  await check(gpu, 80, 5003, { seed: 3 });
});

gpuTest('cross-entropy with large logits (±60), a constant row and a hot row', async (gpu) => {
  await check(gpu, 65, 257, { lo: -60, hi: 60 });
  const v = 100;
  const z = new Float64Array(3 * v).fill(60); // all equal: lse = 60 + log V, softmax uniform
  for (let i = v; i < 2 * v; i++) z[i] = -60;
  z[v + 17] = 60; // one logit 120 above the rest: softmax ≈ onehot, loss ≈ 0 for target 17
  for (let i = 2 * v; i < 3 * v; i++) z[i] = 59 + (i % 3);
  await check(gpu, 3, v, { z, t: Int32Array.from([4, 17, 99]) });
});

gpuTest('cross-entropy gradScale, accumulation and all-but-one ignored', async (gpu) => {
  await check(gpu, 33, 65, { scale: 0.125, fill: -2 });
  await check(gpu, 50, 65, { t: Int32Array.from({ length: 50 }, (_, i) => (i === 31 ? 3 : -1)) });
});

gpuTest('cross-entropy: an all-ignored batch gives loss 0 and no gradient', async (gpu) => {
  for (const n of [1, 300]) {
    const v = 65;
    const tz = gpu.upload(Float32Array.from(randn(n * v, 5, -5, 5)), [n, v]);
    const tt = gpu.upload(new Int32Array(n).fill(-1), [n], 'i32');
    const tlse = gpu.empty([n]), tloss = gpu.upload(new Float32Array([7, 7]), [2]);
    crossEntropyForward(gpu, tz, tt, tlse, tloss);
    const loss = await gpu.read(tloss);
    if (loss[0] !== 0 || loss[1] !== 0) {
      throw new Error(`N=${n}: loss ${loss[0]}, count ${loss[1]}; expected [0, 0]`);
    }
    const td = gpu.upload(new Float32Array(n * v).fill(0.25), [n, v]);
    crossEntropyBackward(gpu, tz, tt, tlse, tloss, td);
    const d = await gpu.read(td);
    if (!d.every((x) => x === 0.25)) {
      throw new Error(`N=${n}: dlogits changed although every row is ignored`);
    }
    for (const x of [tz, tt, tlse, tloss, td]) x.release();
  }
});

// CPU adapters get one invocation per row; GPUs share a row between LANES invocations that
// reduce through workgroup memory or, where the adapter has subgroups, subgroup operations.
// Force several lanes so CPU test runs check every reduction path (fwd_loss's 256-lane sum
// over rows takes the variant too).
await rowVariantTest('cross-entropy with 2 to 256 lanes per row', async (gpu) => {
  for (const lanes of VARIANT_LANES) {
    rowTuning.lanes = lanes;
    for (const n of [1, 7, 65]) {
      for (const v of RAGGED_ROWS) await check(gpu, n, v, { seed: n + v + lanes, lo: -30, hi: 30 });
    }
    await check(gpu, 9, 5003, { seed: lanes, lo: -30, hi: 30 });
    await check(gpu, 300, 3, { seed: lanes }); // fwd_loss: more rows than its 256 lanes
  }
});

gpuTest('cross-entropy at GPT-2 vocabulary size (V = 50257)', async (gpu) => {
  await check(gpu, 6, 50257, { lo: -10, hi: 10, ignored: 0.3 });
});

gpuTest('cross-entropy: a target ≥ V poisons the loss with NaN', async (gpu) => {
  const tz = gpu.upload(new Float32Array(2 * 5), [2, 5]);
  const tt = gpu.upload(Int32Array.from([1, 5]), [2], 'i32');
  const tlse = gpu.empty([2]), tloss = gpu.empty([2]);
  crossEntropyForward(gpu, tz, tt, tlse, tloss);
  const loss = await gpu.read(tloss);
  if (!Number.isNaN(loss[0]) || loss[1] !== 2) {
    throw new Error(`expected [NaN, 2], got [${loss[0]}, ${loss[1]}]`);
  }
  for (const x of [tz, tt, tlse, tloss]) x.release();
});

gpuTest('cross-entropy rejects mismatched shapes and dtypes', async (gpu) => {
  const z = gpu.empty([4, 10]),
    t = gpu.empty([4], 'i32'),
    tf = gpu.empty([4]),
    lse = gpu.empty([4]),
    loss = gpu.empty([2]),
    bad = gpu.empty([3]);
  assertThrows(
    () => crossEntropyForward(gpu, z, tf, lse, loss),
    'targets must have dtype i32, got f32',
  );
  assertThrows(
    () => crossEntropyForward(gpu, z, bad, lse, loss),
    'targets must be (N=4) (4 elements), got [3]',
  );
  assertThrows(() => crossEntropyForward(gpu, z, t, lse, bad), 'loss must be (2)');
  assertThrows(
    () => crossEntropyBackward(gpu, z, t, lse, loss, bad),
    'dlogits must be (N=4, V=10)',
  );
  for (const x of [z, t, tf, lse, loss, bad]) x.release();
  await gpu.sync(); // nothing invalid reached the device
});
