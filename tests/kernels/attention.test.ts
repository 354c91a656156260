import { gpuTest } from '../util/gpu.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import { attentionBackward, attentionForward } from '../../src/kernels/attention.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';

for (const causal of [true, false]) {
  Deno.test(`attention reference backward matches finite differences (causal=${causal})`, () => {
    const d = { b: 2, t: 5, c: 6, nh: 2, causal };
    const qkv = randn(d.b * d.t * 3 * d.c, 11, -2, 2);
    const w = randn(d.b * d.t * d.c, 12);
    const { att } = attentionForwardRef(qkv, d);
    const g = attentionBackwardRef(qkv, att, w, d);
    assertFiniteDiff(
      (x) => dot(attentionForwardRef(x, d).y, w),
      qkv,
      g,
      `attention causal=${causal}`,
      { samples: 200 },
    );
  });
}

// [B, T, nh, hs, causal]: every T of {1, 7, 17, 63, 65}, hs of {8, 16, 32, 64}, nh of {1, 2, 3},
// B of {1, 2}, both maskings; T = 130 spans several workgroups (64×64 outputs each) in both
// directions, so causal block skipping and the k ≥ i start of dK/dV run away from the origin.
const CASES: [number, number, number, number, boolean, number?][] = [
  [1, 1, 1, 8, true],
  [1, 1, 2, 16, false],
  [2, 7, 2, 8, false],
  [2, 7, 3, 32, true],
  [1, 17, 3, 16, true],
  [1, 17, 2, 64, false],
  [2, 63, 2, 32, true],
  [1, 63, 1, 8, false],
  [1, 65, 1, 64, false],
  [2, 65, 3, 16, true],
  [1, 130, 2, 32, true],
  [1, 130, 1, 64, false],
  // A head size that is no multiple of 4 or 8: ragged inner and column edges of every block.
  [2, 17, 3, 6, true],
  // Scores up to ~±100: exp overflows f32 unless the row maximum is subtracted first.
  [1, 33, 2, 32, true, 8],
  [1, 33, 2, 32, false, 8],
];

for (const [b, t, nh, hs, causal, range = 2] of CASES) {
  gpuTest(
    `attention forward/backward B=${b} T=${t} nh=${nh} hs=${hs} causal=${causal} |qkv|≤${range}`,
    async (gpu) => {
      const c = nh * hs;
      const d = { b, t, c, nh, causal };
      const seed = b * 1000 + t * 10 + nh + hs;
      const qkv = randn(b * t * 3 * c, seed, -range, range);
      const dy = randn(b * t * c, seed + 1);
      const pre = randn(b * t * 3 * c, seed + 2);
      const ref = attentionForwardRef(qkv, d);
      const dref = attentionBackwardRef(qkv, ref.att, dy, d);

      const tqkv = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
      const tdy = gpu.upload(Float32Array.from(dy), [b, t, c]);
      // Outputs start as NaN: every element, masked ones included, must be written.
      const ty = gpu.upload(new Float32Array(b * t * c).fill(NaN), [b, t, c]);
      const tatt = gpu.upload(new Float32Array(b * nh * t * t).fill(NaN), [b, nh, t, t]);
      const tdqkv = gpu.upload(Float32Array.from(pre), [b, t, 3 * c]);

      attentionForward(gpu, tqkv, ty, tatt, d);
      assertClose(await gpu.read(tatt), ref.att, 'att');
      assertClose(await gpu.read(ty), ref.y, 'y');

      attentionBackward(gpu, tqkv, tatt, tdy, tdqkv, d);
      const got = await gpu.read(tdqkv);
      assertClose(got, dref.map((v, i) => v + pre[i]), 'dqkv (accumulated onto pre-filled)');
      const delta = Float64Array.from(got, (v, i) => v - pre[i]);
      // Per part, so a wrong dQ cannot hide behind a larger dV.
      for (const [part, lo] of [['dq', 0], ['dk', c], ['dv', 2 * c]] as const) {
        const pick = (a: ArrayLike<number>) => {
          const out: number[] = [];
          for (let r = 0; r < b * t; r++) {
            for (let i = 0; i < c; i++) out.push(a[r * 3 * c + lo + i]);
          }
          return out;
        };
        if (t > 1 || part === 'dv') assertRelRms(pick(delta), pick(dref), part);
      }
      for (const x of [tqkv, tdy, ty, tatt, tdqkv]) x.release();
    },
  );
}

gpuTest('attention on tensors at byte offsets inside larger buffers', async (gpu) => {
  // Activations and gradients may be slices of shared buffers; each slice is bound at its offset.
  const d = { b: 2, t: 9, c: 16, nh: 2, causal: true };
  const n3 = d.b * d.t * 3 * d.c, n1 = d.b * d.t * d.c, na = d.b * d.nh * d.t * d.t;
  const qkv = randn(n3, 5, -2, 2), dy = randn(n1, 6);
  const ref = attentionForwardRef(qkv, d);
  const dref = attentionBackwardRef(qkv, ref.att, dy, d);
  const pad = 64; // floats: 256 bytes, the binding-offset alignment
  const dyOff = Math.ceil((pad + n3) / pad) * pad + pad;
  const inBuf = gpu.zeros([dyOff + n1]);
  const outBuf = gpu.zeros([pad + n1 + pad]);
  const attBuf = gpu.zeros([pad + na]);
  const gradBuf = gpu.zeros([pad + n3]);
  const at = (t: Tensor, off: number, shape: number[]) => new Tensor(gpu, t.buffer, shape, 'f32', off * 4, false);
  const tqkv = at(inBuf, pad, [d.b, d.t, 3 * d.c]), tdy = at(inBuf, dyOff, [d.b, d.t, d.c]);
  const ty = at(outBuf, pad, [d.b, d.t, d.c]), tatt = at(attBuf, pad, [d.b, d.nh, d.t, d.t]);
  const tdqkv = at(gradBuf, pad, [d.b, d.t, 3 * d.c]);
  gpu.write(tqkv, Float32Array.from(qkv));
  gpu.write(tdy, Float32Array.from(dy));
  attentionForward(gpu, tqkv, ty, tatt, d);
  attentionBackward(gpu, tqkv, tatt, tdy, tdqkv, d);
  assertClose(await gpu.read(ty), ref.y, 'y');
  assertClose(await gpu.read(tatt), ref.att, 'att');
  assertClose(await gpu.read(tdqkv), dref, 'dqkv');
  // Nothing outside the slices was touched.
  assertClose(
    (await gpu.read(gradBuf)).subarray(0, pad),
    new Float64Array(pad),
    'dqkv padding',
    0,
    0,
  );
  const outAll = await gpu.read(outBuf);
  assertClose(
    [...outAll.subarray(0, pad), ...outAll.subarray(pad + n1)],
    new Float64Array(2 * pad),
    'y padding',
    0,
    0,
  );
  assertClose(
    (await gpu.read(attBuf)).subarray(0, pad),
    new Float64Array(pad),
    'att padding',
    0,
    0,
  );
  for (const x of [inBuf, outBuf, attBuf, gradBuf]) x.release();
});

gpuTest('attention validates shapes and aliasing', async (gpu) => {
  const d = { b: 1, t: 4, c: 8, nh: 2 };
  const qkv = gpu.zeros([1, 4, 24]);
  const y = gpu.zeros([1, 4, 8]);
  const att = gpu.zeros([1, 2, 4, 4]);
  assertThrows(() => attentionForward(gpu, qkv, y, att, { ...d, nh: 3 }), 'not divisible');
  assertThrows(() => attentionForward(gpu, qkv, y, att, { ...d, t: 5 }), 'qkv has shape');
  assertThrows(() => attentionForward(gpu, qkv, qkv, att, d), 'y has shape');
  assertThrows(
    () => attentionForward(gpu, qkv, att.view([1, 4, 8]), att, d),
    'share one GPUBuffer',
  );
  assertThrows(() => attentionForward(gpu, qkv, y, att, { ...d, b: 0 }), 'dims.b');
  assertThrows(() => attentionBackward(gpu, qkv, att, y, qkv, d), 'share one GPUBuffer');
  assertThrows(
    () => attentionBackward(gpu, qkv, att, y, qkv.view([4, 24]).view([1, 4, 24]), d),
    'share one GPUBuffer',
  );
  for (const x of [qkv, y, att]) x.release();
  await gpu.sync(); // the rejected calls encoded nothing the device could complain about
});
