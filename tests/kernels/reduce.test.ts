import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { columnSum, rowLanes } from '../../src/kernels/reduce.ts';
import { Tensor } from '../../src/gpu/tensor.ts';

function columnSumRef(dy: Float64Array, n: number, c: number): Float64Array {
  const out = new Float64Array(c);
  for (let r = 0; r < n; r++) for (let i = 0; i < c; i++) out[i] += dy[r * c + i];
  return out;
}

gpuTest('columnSum accumulates column sums on ragged shapes', async (gpu) => {
  // n ≤ 64 takes one pass, more rows take partials + a finishing pass.
  for (const n of [1, 7, 63, 64, 65, 257, 8192]) {
    for (const c of [1, 7, 64, 65, 128, 257]) {
      if (n * c > 600_000) continue;
      const dy = randn(n * c, n * 31 + c);
      const fill = randn(c, 5 * n + c); // a non-zero starting gradient
      const tdy = gpu.upload(Float32Array.from(dy), [n, c]);
      const tdb = gpu.upload(Float32Array.from(fill), [c]);
      columnSum(gpu, tdy, tdb, n, c);
      const got = await gpu.read(tdb);
      const ref = columnSumRef(dy, n, c);
      assertClose(got, ref.map((x, i) => x + fill[i]), `n=${n} c=${c}`);
      assertRelRms(got.map((x, i) => x - fill[i]), ref, `n=${n} c=${c}`);
      tdy.release();
      tdb.release();
    }
  }
});

gpuTest(
  'columnSum into a slice of a flat gradient buffer leaves its neighbours alone',
  async (gpu) => {
    const n = 100, c = 10;
    const dy = randn(n * c, 9);
    const flat = gpu.upload(new Float32Array(256).fill(1), [256]);
    const db = new Tensor(gpu, flat.buffer, [c], 'f32', 64 * 4, false);
    const tdy = gpu.upload(Float32Array.from(dy), [n, c]);
    columnSum(gpu, tdy, db, n, c);
    const got = await gpu.read(flat);
    const want = new Float64Array(256).fill(1);
    columnSumRef(dy, n, c).forEach((x, i) => (want[64 + i] += x));
    assertClose(got, want, 'flat buffer');
    flat.release();
    tdy.release();
  },
);

gpuTest('columnSum validates shapes', async (gpu) => {
  const dy = gpu.empty([4, 3]), db = gpu.empty([3]);
  assertThrows(
    () => columnSum(gpu, dy, db, 4, 4),
    'dy must be (n=4, c=4) (16 elements), got [4,3] (12)',
  );
  assertThrows(() => columnSum(gpu, dy, db, 6, 2), 'db must be (c=2) (2 elements), got [3] (3)');
  assertThrows(() => columnSum(gpu, dy, db, 2.5, 3), 'n must be a non-negative integer, got 2.5');
  dy.release();
  db.release();
  await gpu.sync(); // nothing invalid reached the device
});

Deno.test('rowLanes picks a power of two covering the row, at most 256', () => {
  const cases: [number, number, number][] = [[1, 8, 1], [8, 8, 1], [9, 8, 2], [384, 8, 64], [
    50257,
    8,
    256,
  ], [50257, 4096, 16]];
  for (const [len, per, want] of cases) {
    const got = rowLanes(len, per);
    if (got !== want) throw new Error(`rowLanes(${len}, ${per}) = ${got}, expected ${want}`);
  }
});
