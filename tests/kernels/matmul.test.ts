import { gpuTest } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { check } from '../util/matmul_check.ts';
import { matmul, matmulPlain, matmulTuning } from '../../src/kernels/matmul.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Throws unless `fn` throws an Error whose message contains `part`. */
function assertThrows(fn: () => unknown, part: string): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof Error) || !e.message.includes(part)) {
      throw new Error(`expected an error containing '${part}', got: ${e}`);
    }
    return;
  }
  throw new Error(`expected an error containing '${part}', but nothing was thrown`);
}

function assertEquals<T>(actual: T, expected: T, what = 'value'): void {
  if (JSON.stringify(actual) !== JSON.stringify(expected)) {
    throw new Error(`${what}: got ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
  }
}

/** Explicit transpose of a rows×cols row-major matrix. */
function transpose(x: Float64Array, rows: number, cols: number): Float64Array {
  const out = new Float64Array(x.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = x[i * cols + j];
  return out;
}

Deno.test('matmulRef: hand-computed product, and transpose flags equal explicit transposes', () => {
  // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]
  assertEquals(Array.from(matmulRef([1, 2, 3, 4], [5, 6, 7, 8], 2, 2, 2)), [19, 22, 43, 50]);
  assertEquals(Array.from(matmulRef([1, 2, 3, 4], [5, 6, 7, 8], 2, 2, 2, { alpha: 2, beta: -1, c: [1, 1, 1, 1] })), [
    37,
    43,
    85,
    99,
  ]);
  const [m, n, k] = [5, 3, 4];
  const a = randn(m * k, 1), b = randn(k * n, 2);
  const nn = matmulRef(a, b, m, n, k);
  assertClose(matmulRef(transpose(a, m, k), b, m, n, k, { transA: true }), nn, 'TN', 1e-12, 0);
  assertClose(matmulRef(a, transpose(b, k, n), m, n, k, { transB: true }), nn, 'NT', 1e-12, 0);
  assertClose(
    matmulRef(transpose(a, m, k), transpose(b, k, n), m, n, k, { transA: true, transB: true }),
    nn,
    'TT',
    1e-12,
    0,
  );
});

const LAYOUTS: [string, boolean, boolean][] = [['NN', false, false], ['NT', false, true], ['TN', true, false], [
  'TT',
  true,
  true,
]];
const RAGGED = [1, 7, 63, 65, 127, 257];
/** (alpha, beta) pairs: plain product, accumulate (beta = 1, as gradients do), both scaled. */
const SCALES: [number, number][] = [[1, 0], [-0.75, 1], [2, 0.5]];

for (const [name, transA, transB] of LAYOUTS) {
  gpuTest(`matmul ${name}: ragged M, N, K from {1, 7, 63, 65, 127, 257} with alpha/beta`, async (gpu) => {
    // Each size takes each position, plus squares: every ragged edge of the 64×16 tile and of
    // the vec4 rows, and all three (alpha, beta) kinds, in 8 products per layout.
    const cases: [number, number, number][] = RAGGED.map((
      _,
      i,
    ) => [RAGGED[i], RAGGED[(i + 1) % 6], RAGGED[(i + 2) % 6]]);
    cases.push([65, 65, 65], [128, 64, 32]);
    for (const [i, [m, n, k]] of cases.entries()) {
      const [alpha, beta] = SCALES[i % SCALES.length];
      await check(
        gpu,
        m,
        n,
        k,
        { transA, transB, alpha, beta },
        10 * i + 1,
        `${name} ${m}×${n}×${k} alpha ${alpha} beta ${beta}`,
      );
    }
  });
}

gpuTest('matmul: the shapes of training (forward NT, dX NN, dW TN accumulating)', async (gpu) => {
  // A GPT block at n_embd 128, B·T = 256 rows, vocab 65 (ragged).
  await check(gpu, 256, 384, 128, { transB: true }, 101, 'qkv forward x·Wᵀ');
  await check(gpu, 256, 128, 65, { beta: 1 }, 102, 'head dX += dY·W (K = 65)');
  await check(gpu, 65, 128, 256, { transA: true, beta: 1 }, 103, 'head dW += dYᵀ·X (M = 65)');
});

gpuTest('matmul: split-K for a small output over a long K (dW of 128×128 over 8192)', async (gpu) => {
  // Split-K is the CPU kernel's (forced, so a GPU run checks it too).
  matmulTuning.forceRegister = true;
  try {
    const before = gpu.dispatchCount;
    await check(gpu, 128, 128, 8192, { transA: true, beta: 1 }, 201, 'dW 128×128 K 8192');
    assertEquals(gpu.dispatchCount - before, 2, 'dispatches of split-K (the kernel over grid z, then one reduce pass)');
    // Ragged everything, K not a multiple of 4 nor of the split.
    await check(gpu, 7, 9, 2001, { alpha: 0.5 }, 202, 'split-K 7×9 K 2001');
    await check(gpu, 63, 17, 1299, { transA: true, transB: true, beta: 1 }, 203, 'split-K TT 63×17 K 1299');
  } finally {
    matmulTuning.forceRegister = false;
  }
});

// Both kernels (the tiled one forced on a CPU adapter): WebGPU refuses a buffer bound read-only
// and writable in one dispatch, so the tiled path must read operands in C's buffer from a copy.
for (const forceTiled of [false, true]) {
  gpuTest(
    `matmul: operands and output as slices at non-zero offsets of shared buffers (forceTiled ${forceTiled})`,
    async (gpu) => {
      matmulTuning.forceTiled = forceTiled;
      try {
        await sharedBuffers(gpu);
      } finally {
        matmulTuning.forceTiled = false;
      }
    },
  );
}

async function sharedBuffers(gpu: Gpu): Promise<void> {
  const [m, n, k] = [7, 9, 63];
  const a = randn(m * k, 301), b = randn(k * n, 302), c0 = randn(m * n, 303);
  const ref = matmulRef(a, b, m, n, k, { beta: 1, c: c0 });
  // One buffer holding a guard word at 0, then A, B and C at 256-byte aligned offsets.
  const guard = 12345;
  const offA = 256, offB = offA + 256 * Math.ceil((m * k * 4) / 256), offC = offB + 256 * Math.ceil((k * n * 4) / 256);
  const host = new Float32Array(offC / 4 + m * n + 64).fill(guard);
  host.set(Float32Array.from(a), offA / 4);
  host.set(Float32Array.from(b), offB / 4);
  host.set(Float32Array.from(c0), offC / 4);
  const whole = gpu.upload(host, [host.length]);
  const ta = new Tensor(gpu, whole.buffer, [m, k], 'f32', offA, false, 'A slice');
  const tb = new Tensor(gpu, whole.buffer, [k, n], 'f32', offB, false, 'B slice');
  const tc = new Tensor(gpu, whole.buffer, [m, n], 'f32', offC, false, 'C slice');
  matmul(gpu, ta, tb, tc, m, n, k, { beta: 1 });
  const after = await gpu.read(whole);
  assertClose(after.subarray(offC / 4, offC / 4 + m * n), ref, 'slice product');
  for (
    const [from, to] of [[0, offA / 4], [offA / 4 + m * k, offB / 4], [offB / 4 + k * n, offC / 4], [
      offC / 4 + m * n,
      host.length,
    ]]
  ) {
    for (let i = from; i < to; i++) {
      if (after[i] !== guard) throw new Error(`word ${i} outside A, B, C changed to ${after[i]}`);
    }
  }
  whole.release();

  // Slices ending exactly at the end of a buffer whose size is not a multiple of 16 bytes:
  // the kernel's 16-byte-rounded vec4 views would not fit, so they go through staging copies.
  const tight = (data: Float64Array): Tensor => {
    const buf = gpu.device.createBuffer({
      size: 256 + data.length * 4,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    const t = new Tensor(gpu, buf, [data.length], 'f32', 256, false, 'tight slice');
    gpu.write(t, Float32Array.from(data));
    return t;
  };
  const [sa, sb, sc] = [tight(a), tight(b), tight(c0)];
  matmul(gpu, sa, sb, sc, m, n, k, { beta: 1 });
  assertClose(await gpu.read(sc), ref, 'tight slices');
  for (const t of [sa, sb, sc]) t.buffer.destroy();
}

gpuTest('matmul: K = 0 gives beta·C; empty outputs are a no-op', async (gpu) => {
  const c0 = randn(12, 401);
  const tc = gpu.upload(Float32Array.from(c0), [3, 4]);
  const empty = gpu.empty([0]);
  matmul(gpu, empty, empty, tc, 3, 4, 0, { beta: 0.5 });
  assertClose(await gpu.read(tc), Array.from(c0, (v) => 0.5 * v), 'K = 0, beta 0.5');
  matmul(gpu, empty, empty, tc, 3, 4, 0);
  assertClose(await gpu.read(tc), new Float64Array(12), 'K = 0, beta 0');
  matmul(gpu, empty, empty, empty, 0, 5, 0);
  for (const t of [tc, empty]) t.release();
});

gpuTest('matmul: mismatched sizes and overlapping output throw clear errors', async (gpu) => {
  const a = gpu.empty([6, 4]), b = gpu.empty([4, 5]), c = gpu.empty([6, 5]);
  assertThrows(() => matmul(gpu, a, b, c, 6, 5, 3), 'matmul: A is [6,4] (24 elements) but must hold (M,K) = 6×3');
  const b15 = gpu.empty([3, 5]);
  assertThrows(
    () => matmul(gpu, a, b15, c, 6, 5, 4, { transB: true }),
    'matmul: B is [3,5] (15 elements) but must hold (N,K) = 5×4 = 20',
  );
  const c24 = gpu.empty([6, 4]);
  assertThrows(
    () => matmul(gpu, a, b, c24, 6, 5, 4),
    'matmul: C is [6,4] (24 elements) but must hold (M,N) = 6×5 = 30',
  );
  assertThrows(() => matmul(gpu, a, b, c, 6, 5, 4.5), 'k must be a non-negative integer');
  const square = gpu.empty([4, 4]);
  assertThrows(() => matmul(gpu, square, square, square, 4, 4, 4), 'C overlaps A');
  assertThrows(() => matmulPlain(gpu, a, b, c, 6, 5, 3), 'matmulPlain: A is [6,4]');
  for (const t of [a, b, b15, c, c24, square]) t.release();
  await gpu.sync(); // the rejected calls encoded nothing that WebGPU would reject
});

gpuTest('matmulPlain (the bench baseline) matches the reference on ragged sizes', async (gpu) => {
  for (const [i, [m, n, k]] of ([[1, 7, 63], [65, 63, 127], [257, 17, 1]] as const).entries()) {
    const a = randn(m * k, 501 + i), b = randn(k * n, 601 + i);
    const ta = gpu.upload(Float32Array.from(a), [m, k]),
      tb = gpu.upload(Float32Array.from(b), [k, n]),
      tc = gpu.empty([m, n]);
    matmulPlain(gpu, ta, tb, tc, m, n, k);
    assertClose(await gpu.read(tc), matmulRef(a, b, m, n, k), `plain ${m}×${n}×${k}`);
    for (const t of [ta, tb, tc]) t.release();
  }
});
