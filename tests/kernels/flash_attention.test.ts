import { gpuTest } from '../util/gpu.ts';
import { checkNoQuadraticAllocation } from './flash_pool.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { flashAttentionBackward, flashAttentionForward, flashTuning } from '../../src/kernels/flash_attention.ts';
import { attentionBackward, attentionForward } from '../../src/kernels/attention.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';

/** Channels lo … lo+C of every token row of a (B·T, 3C) array: dq (0), dk (C) or dv (2C). */
function part(a: ArrayLike<number>, rows: number, c: number, lo: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < c; i++) out.push(a[r * 3 * c + lo + i]);
  }
  return out;
}

// [B, T, nh, hs, causal, |qkv| range]: T of {1, 17, 63, 113, 257} (none a multiple of the
// 4-row blocks; at 257 the 65 blocks per head span two 64-invocation workgroups), hs of
// {32, 64, 128} plus 7 (no multiple of 4: the masked loads and stores of the last vec4),
// nh of {1, 2, 3}, B of {1, 2}, both maskings, and ±8 inputs whose scores reach ~±100
// (exp overflows f32 unless the running max is subtracted).
const CASES: [number, number, number, number, boolean, number?][] = [
  [1, 1, 1, 32, true],
  [2, 1, 2, 64, false],
  [2, 17, 3, 32, true],
  [1, 17, 2, 128, false],
  [2, 63, 2, 64, false],
  [1, 63, 1, 128, true],
  [1, 113, 3, 32, false],
  [2, 113, 1, 64, true],
  [1, 257, 2, 64, true],
  [1, 257, 1, 128, false],
  [1, 257, 1, 32, true],
  [2, 17, 3, 7, true],
  [1, 63, 2, 7, false],
  [1, 33, 2, 32, true, 8],
  [1, 33, 2, 32, false, 8],
];

/** Forward and backward of one case against the f64 references, accumulating onto pre-filled dqkv. */
async function checkCase(
  gpu: Gpu,
  b: number,
  t: number,
  nh: number,
  hs: number,
  causal: boolean,
  range: number,
): Promise<void> {
  const c = nh * hs;
  const d = { b, t, c, nh, causal };
  const seed = b * 1000 + t * 10 + nh + hs;
  const qkv = randn(b * t * 3 * c, seed, -range, range);
  const dy = randn(b * t * c, seed + 1);
  const pre = randn(b * t * 3 * c, seed + 2);
  const ref = attentionForwardRef(qkv, d);
  const lref = ref.lse;
  const dref = attentionBackwardRef(qkv, ref.att, dy, d);

  const tqkv = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
  const tdy = gpu.upload(Float32Array.from(dy), [b, t, c]);
  // Outputs start as NaN: every element must be written.
  const ty = gpu.upload(new Float32Array(b * t * c).fill(NaN), [b, t, c]);
  const tlse = gpu.upload(new Float32Array(b * nh * t).fill(NaN), [b, nh, t]);
  const tdqkv = gpu.upload(Float32Array.from(pre), [b, t, 3 * c]);

  flashAttentionForward(gpu, tqkv, ty, tlse, d);
  assertClose(await gpu.read(ty), ref.y, 'y');
  assertClose(await gpu.read(tlse), lref, 'lse');

  flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
  const got = await gpu.read(tdqkv);
  assertClose(got, dref.map((v, i) => v + pre[i]), 'dqkv (accumulated onto pre-filled)');
  const delta = Float64Array.from(got, (v, i) => v - pre[i]);
  assertClose(delta, dref, 'dqkv');
  // Per part, so a wrong dQ cannot hide behind a larger dV.
  for (const [name, lo] of [['dq', 0], ['dk', c], ['dv', 2 * c]] as const) {
    if (t > 1 || name === 'dv') {
      assertRelRms(part(delta, b * t, c, lo), part(dref, b * t, c, lo), name);
    }
  }
  for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
}

for (const [b, t, nh, hs, causal, range = 2] of CASES) {
  gpuTest(
    `flash attention forward/backward B=${b} T=${t} nh=${nh} hs=${hs} causal=${causal} |qkv|≤${range}`,
    (gpu) => checkCase(gpu, b, t, nh, hs, causal, range),
  );
}

// Several dispatches over chunks of the streamed rows (what CPU adapters do past
// flashCpuChunk(hs) rows), forced small: [B, T, nh, hs, causal, chunk]. The forward carries
// O, m and ℓ across chunks; causal rows whose keys all lie in earlier chunks pass through.
const CHUNKED: [number, number, number, number, boolean, number][] = [
  [2, 63, 2, 32, true, 8],
  [1, 113, 3, 64, false, 12],
  [1, 257, 1, 128, true, 64],
  [2, 17, 3, 7, false, 4],
];
for (const [b, t, nh, hs, causal, chunk] of CHUNKED) {
  gpuTest(
    `flash attention in chunks of ${chunk} rows B=${b} T=${t} nh=${nh} hs=${hs} causal=${causal}`,
    async (gpu) => {
      flashTuning.chunk = chunk;
      try {
        await checkCase(gpu, b, t, nh, hs, causal, 4);
      } finally {
        flashTuning.chunk = null;
      }
    },
  );
}

gpuTest('flash attention on tensors at byte offsets inside larger buffers', async (gpu) => {
  // Activations and gradients may be slices of shared buffers; each slice is bound at its offset
  // and nothing outside it is written.
  const d = { b: 2, t: 9, c: 16, nh: 2, causal: true };
  const n3 = d.b * d.t * 3 * d.c, n1 = d.b * d.t * d.c, nl = d.b * d.nh * d.t;
  const qkv = randn(n3, 5, -2, 2), dy = randn(n1, 6);
  const ref = attentionForwardRef(qkv, d);
  const dref = attentionBackwardRef(qkv, ref.att, dy, d);
  const pad = 64; // floats: 256 bytes, the binding-offset alignment
  const dyOff = Math.ceil((pad + n3) / pad) * pad + pad;
  const lseOff = Math.ceil((pad + n1) / pad) * pad + pad;
  const inBuf = gpu.zeros([dyOff + n1]);
  const outBuf = gpu.zeros([lseOff + nl + pad]);
  const gradBuf = gpu.zeros([pad + n3 + pad]);
  const at = (t: Tensor, off: number, shape: number[]) => new Tensor(gpu, t.buffer, shape, 'f32', off * 4, false);
  const tqkv = at(inBuf, pad, [d.b, d.t, 3 * d.c]), tdy = at(inBuf, dyOff, [d.b, d.t, d.c]);
  // y and lse slices of one buffer.
  const ty = at(outBuf, pad, [d.b, d.t, d.c]), tlse = at(outBuf, lseOff, [d.b, d.nh, d.t]);
  const tdqkv = at(gradBuf, pad, [d.b, d.t, 3 * d.c]);
  gpu.write(tqkv, Float32Array.from(qkv));
  gpu.write(tdy, Float32Array.from(dy));
  const lseGot = gpu.empty([d.b, d.nh, d.t]);
  // lse shares y's buffer: the forward refuses it (two writable bindings of one buffer)...
  assertThrows(
    () => flashAttentionForward(gpu, tqkv, ty, tlse, d),
    'y and lse share one GPUBuffer',
  );
  // ...so write lse elsewhere and copy it into the slice the backward reads.
  flashAttentionForward(gpu, tqkv, ty, lseGot, d);
  gpu.copy(lseGot, tlse);
  flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
  assertClose(await gpu.read(ty), ref.y, 'y');
  assertClose(await gpu.read(tlse), ref.lse, 'lse');
  assertClose(await gpu.read(tdqkv), dref, 'dqkv');
  const grad = await gpu.read(gradBuf);
  assertClose(
    [...grad.subarray(0, pad), ...grad.subarray(pad + n3)],
    new Float64Array(2 * pad),
    'dqkv padding',
    0,
    0,
  );
  const out = await gpu.read(outBuf);
  assertClose(
    [...out.subarray(0, pad), ...out.subarray(pad + n1, lseOff), ...out.subarray(lseOff + nl)],
    new Float64Array(out.length - n1 - nl),
    'y/lse padding',
    0,
    0,
  );
  for (const x of [inBuf, outBuf, gradBuf, lseGot]) x.release();
});

gpuTest('flash attention allocates nothing of size T×T (T=257, pool accounting)', checkNoQuadraticAllocation);

gpuTest(
  'flash attention validates shapes, head size, aliasing and the chunk override',
  async (gpu) => {
    const d = { b: 1, t: 4, c: 8, nh: 2 };
    const qkv = gpu.zeros([1, 4, 24]);
    const y = gpu.zeros([1, 4, 8]);
    const lse = gpu.zeros([1, 2, 4]);
    const dy = gpu.zeros([1, 4, 8]);
    const dqkv = gpu.zeros([1, 4, 24]);
    assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, { ...d, nh: 3 }), 'not divisible');
    assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, { ...d, t: 5 }), 'qkv has shape');
    assertThrows(() => flashAttentionForward(gpu, qkv, qkv, lse, d), 'y has shape');
    assertThrows(() => flashAttentionForward(gpu, qkv, y, y, d), 'lse has shape');
    assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, { ...d, b: 0 }), 'dims.b');
    assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, { ...d, t: 2.5 }), 'dims.t');
    assertThrows(
      () => flashAttentionForward(gpu, qkv, y, lse, { ...d, nh: 1, c: 256 }),
      'head size 256',
    );
    // y and lse bound at offsets inside qkv's buffer: a writable binding aliasing a read one.
    const yInQkv = new Tensor(gpu, qkv.buffer, [1, 4, 8], 'f32', 0, false);
    const lseInQkv = new Tensor(gpu, qkv.buffer, [1, 2, 4], 'f32', 256, false);
    assertThrows(
      () => flashAttentionForward(gpu, qkv, yInQkv, lse, d),
      'y and qkv share one GPUBuffer',
    );
    assertThrows(
      () => flashAttentionForward(gpu, qkv, y, lseInQkv, d),
      'lse and qkv share one GPUBuffer',
    );
    const shared = gpu.zeros([64 + 96]);
    const dyIn = new Tensor(gpu, shared.buffer, [1, 4, 8], 'f32', 0, false);
    const dqkvIn = new Tensor(gpu, shared.buffer, [1, 4, 24], 'f32', 256, false);
    assertThrows(
      () => flashAttentionBackward(gpu, qkv, y, lse, dyIn, dqkvIn, d),
      'dqkv and dy share one GPUBuffer',
    );
    shared.release();
    assertThrows(() => flashAttentionBackward(gpu, qkv, y, lse, dy, qkv, d), 'share one GPUBuffer');
    assertThrows(
      () => flashAttentionBackward(gpu, qkv, y, lse, dy, dqkv, { ...d, t: 3 }),
      'has shape',
    );
    assertThrows(() => flashAttentionBackward(gpu, qkv, y, lse, dy, y, d), 'dqkv has shape');
    flashTuning.chunk = 6;
    try {
      assertThrows(() => flashAttentionForward(gpu, qkv, y, lse, d), 'multiple of 4');
    } finally {
      flashTuning.chunk = null;
    }
    for (const x of [qkv, y, lse, dy, dqkv]) x.release();
    await gpu.sync(); // the rejected calls encoded nothing the device could complain about
  },
);

// Timings against the naive kernels, printed, not asserted (set FLASH_BENCH=1).
if (Deno.env.get('FLASH_BENCH')) {
  for (const t of [256, 1024]) {
    gpuTest(`flash vs naive attention timing T=${t}`, async (gpu) => {
      const [b, nh, hs] = [1, 4, 64];
      const c = nh * hs;
      const d = { b, t, c, nh, causal: true };
      const qkv = gpu.upload(Float32Array.from(randn(b * t * 3 * c, 1, -1, 1)), [b, t, 3 * c]);
      const dy = gpu.upload(Float32Array.from(randn(b * t * c, 2)), [b, t, c]);
      const y = gpu.empty([b, t, c]);
      const lse = gpu.empty([b, nh, t]);
      const att = gpu.empty([b, nh, t, t]);
      const g = gpu.zeros([b, t, 3 * c]);
      const time = async (f: () => void) => {
        f();
        await gpu.sync();
        const reps = 3;
        const t0 = performance.now();
        for (let i = 0; i < reps; i++) f();
        await gpu.sync();
        return (performance.now() - t0) / reps;
      };
      const ff = await time(() => flashAttentionForward(gpu, qkv, y, lse, d));
      const fb = await time(() => flashAttentionBackward(gpu, qkv, y, lse, dy, g, d));
      const nf = await time(() => attentionForward(gpu, qkv, y, att, d));
      const nb = await time(() => attentionBackward(gpu, qkv, att, dy, g, d));
      console.log(
        `T=${t} B=${b} nh=${nh} hs=${hs} causal: flash fwd ${ff.toFixed(1)} ms, bwd ${fb.toFixed(1)} ms; ` +
          `naive fwd ${nf.toFixed(1)} ms, bwd ${nb.toFixed(1)} ms`,
      );
      for (const x of [qkv, dy, y, lse, att, g]) x.release();
    });
  }
}
