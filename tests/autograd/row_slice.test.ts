/**
 * rowSlice and the row-chunked LM head (src/models/head.ts): the chunked head's loss and
 * gradients equal the unchunked head's on ragged row counts, ignored targets included, and one
 * chunk is the unchunked path bit for bit.
 */
import { deepEqual, equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { crossEntropy, linear, rowSlice } from '../../src/autograd/ops.ts';
import { headChunkRows, headRowGranule, headTuning, lmHeadLoss } from '../../src/models/head.ts';
import { DeviceLimitError } from '../../src/gpu/limits.ts';
import type { Gpu } from '../../src/gpu/context.ts';

interface HeadOut {
  loss: Float32Array;
  dx: Float32Array;
  dw: Float32Array;
  chunked: boolean;
}

/** One head forward + backward with x (N, C) a leaf and w (V, C) a parameter; `maxRows` 0 = device limits only. */
async function runHead(
  gpu: Gpu,
  x: Float64Array,
  w: Float64Array,
  targets: Int32Array,
  c: number,
  v: number,
  maxRows: number,
  gradScale: number,
): Promise<HeadOut> {
  const n = targets.length;
  headTuning.maxRows = maxRows;
  try {
    const tx = gpu.upload(Float32Array.from(x), [n, c]);
    const tw = gpu.upload(Float32Array.from(w), [v, c]);
    const dw = gpu.zeros([v, c]);
    const tt = gpu.upload(targets, [n], 'i32');
    const tape = new Tape(gpu, new Map([[tw, dw]]));
    tape.requireGrad(tx);
    const { logits, loss } = lmHeadLoss(tape, tx, tw, tt, gradScale);
    tape.backward(RULES);
    const out = {
      loss: await gpu.read(loss) as Float32Array,
      dx: await gpu.read(tape.gradOf(tx)!) as Float32Array,
      dw: await gpu.read(dw) as Float32Array,
      chunked: logits === null,
    };
    tape.dispose();
    for (const t of [tx, tw, dw, tt]) t.release();
    return out;
  } finally {
    headTuning.maxRows = 0;
  }
}

/** f64 per-row cross-entropy lse − z_target of x · wᵀ (NaN for ignored rows). */
function rowLosses(x: Float64Array, w: Float64Array, targets: Int32Array, c: number, v: number): Float64Array {
  return Float64Array.from(targets, (t, r) => {
    if (t < 0) return NaN;
    const z = Array.from({ length: v }, (_, j) => {
      let s = 0;
      for (let k = 0; k < c; k++) s += x[r * c + k] * w[j * c + k];
      return s;
    });
    const m = Math.max(...z);
    return m + Math.log(z.reduce((a, zi) => a + Math.exp(zi - m), 0)) - z[t];
  });
}

const CASES: { n: number; c: number; v: number; maxRows: number; ignoredTargets: boolean }[] = [
  { n: 200, c: 24, v: 37, maxRows: 64, ignoredTargets: false }, // chunks 64, 64, 64, 8
  { n: 131, c: 5, v: 300, maxRows: 100, ignoredTargets: false }, // odd C; 100 rounds down to 64: 64, 64, 3
  { n: 150, c: 16, v: 41, maxRows: 64, ignoredTargets: true }, // a wholly ignored chunk and scattered ignores
];

for (const { n, c, v, maxRows, ignoredTargets } of CASES) {
  gpuTest(
    `chunked LM head = unchunked: loss and gradients (N=${n}, C=${c}, V=${v}, ≤${maxRows} rows, ignored targets: ${ignoredTargets})`,
    async (gpu) => {
      const g = headRowGranule(gpu);
      const r = rng(n + c);
      const targets = Int32Array.from(
        { length: n },
        (_, i) => (ignoredTargets && ((i >= g && i < 2 * g) || r() < 0.2) ? -1 : Math.floor(r() * v)),
      );
      const x = randn(n * c, 7 * n, -2, 2), w = randn(v * c, 11 * v, -1, 1);
      const gradScale = 0.7;
      const ref = await runHead(gpu, x, w, targets, c, v, 0, gradScale);
      const got = await runHead(gpu, x, w, targets, c, v, maxRows, gradScale);
      ok(!ref.chunked && got.chunked, 'the forced run is chunked and the reference is not');
      equal(got.loss[1], ref.loss[1], 'count of counted targets');
      if (!ignoredTargets) assertClose([got.loss[0]], [ref.loss[0]], 'mean loss');
      else {
        // Documented: with ignored rows the reported mean is Σ (n_i/N)·mean_i over chunks.
        const rows = Math.min(Math.floor(maxRows / g) * g, n), per = rowLosses(x, w, targets, c, v);
        let want = 0;
        for (let r0 = 0; r0 < n; r0 += rows) {
          const part = [...per.subarray(r0, r0 + rows)].filter((l) => !Number.isNaN(l));
          if (part.length) want += (Math.min(rows, n - r0) / n) * part.reduce((a, l) => a + l, 0) / part.length;
        }
        assertClose([got.loss[0]], [want], 'row-weighted mean of chunk means');
      }
      for (const [name, a, b] of [['dx', got.dx, ref.dx], ['dw', got.dw, ref.dw]] as const) {
        ok(b.some((e) => e !== 0), `${name} reference is non-zero`);
        assertClose(a, b, name);
        assertRelRms(a, b, name);
      }
    },
  );
}

gpuTest('one chunk is the unchunked linear + crossEntropy, bit for bit', async (gpu) => {
  const n = 70, c = 12, v = 29;
  const x = gpu.upload(Float32Array.from(randn(n * c, 3)), [n, c]);
  const w = gpu.upload(Float32Array.from(randn(v * c, 4)), [v, c]);
  const r = rng(5);
  const t = gpu.upload(Int32Array.from({ length: n }, () => Math.floor(r() * v)), [n], 'i32');
  const runs: Float32Array[][] = [];
  for (const chunkFn of [true, false]) {
    const dw = gpu.zeros([v, c]);
    const tape = new Tape(gpu, new Map([[w, dw]]));
    let loss;
    if (chunkFn) {
      const out = lmHeadLoss(tape, x, w, t, 0.5);
      ok(out.logits !== null, 'one chunk keeps the logits');
      loss = out.loss;
    } else loss = crossEntropy(tape, linear(tape, x, w, null), t, 0.5);
    tape.backward(RULES);
    runs.push([await gpu.read(loss) as Float32Array, await gpu.read(dw) as Float32Array]);
    tape.dispose();
    dw.release();
  }
  deepEqual(runs[0], runs[1]);
  for (const e of [x, w, t]) e.release();
});

gpuTest('rowSlice and headChunkRows reject what they cannot do', (gpu) => {
  const g = headRowGranule(gpu);
  const x = gpu.zeros([3 * g, 3]);
  const tape = new Tape(gpu);
  assertThrows(() => rowSlice(tape, x, 1, 2), 'minStorageBufferOffsetAlignment');
  assertThrows(() => rowSlice(tape, x, 2 * g, g + 1), 'rows');
  assertThrows(() => rowSlice(tape, x.view([9 * g]), 0, 1), 'is not (N, C)');
  const y = rowSlice(tape, x, g, g);
  deepEqual([y.shape, y.offset, y.buffer === x.buffer], [[g, 3], g * 12, true]);
  const lim = Math.min(gpu.device.limits.maxStorageBufferBindingSize, gpu.device.limits.maxBufferSize);
  const rows = headChunkRows(gpu, 50257);
  ok(
    rows % g === 0 && rows * 50257 * 4 <= lim && (rows + g) * 50257 * 4 > lim,
    `chunk of ${rows} rows is the largest aligned one under ${lim} bytes`,
  );
  let err: unknown = null;
  try {
    headChunkRows(gpu, Math.floor(lim / (4 * g)) + 1);
  } catch (e) {
    err = e;
  }
  ok(
    err instanceof DeviceLimitError && err.limit === 'maxStorageBufferBindingSize',
    `a vocabulary too wide for ${g} rows fails naming the limit: ${err}`,
  );
  tape.dispose();
  x.release();
});
