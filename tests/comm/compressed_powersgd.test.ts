/**
 * PowerSGD's allReduce of a packed gradient (src/comm/powersgd_allreduce.ts) over 2 and 3 ranks
 * sharing one GPU: over two steps (the second warm-started and carrying residuals) every rank
 * gets the same vector, equal to one f64 PowerSGD step of the ranks' mean M = g + e for the
 * compressed matrices and to the plain mean elsewhere; the words sent equal powerSgdTraffic.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertRelRms, randn } from '../util/assert.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { PowerSgdAllReduce } from '../../src/comm/powersgd_allreduce.ts';
import { powerSgdTraffic } from '../../src/comm/compressed_cost.ts';
import type { GradMatrix } from '../../src/comm/compression.ts';
import { powerSgdInitialQ } from '../../src/kernels/compress/index.ts';
import { powerSgdRef } from '../../src/reference/compress.ts';

// w1 and w3 are worth rank 2; w2 (12 × 5) is not (2·2·17 > 60) and goes whole with the bias.
const MATRICES: GradMatrix[] = [
  { name: 'w1', offset: 0, rows: 8, cols: 12 },
  { name: 'w2', offset: 108, rows: 12, cols: 5 },
  { name: 'w3', offset: 168, rows: 16, cols: 16 },
];
const N = 424, RANK = 2, SEED = 5;

gpuTest('PowerSGD allReduce: two warm-started steps equal the f64 reference of the mean; words match', async (gpu) => {
  for (const p of [2, 3]) {
    const grads = (t: number, r: number) => Float32Array.from(randn(N, 1000 * t + 10 * r + p));
    const world = localWorld(p, { trace: true });
    try {
      const outs = await onEveryRank(world, async (comm) => {
        const ar = new PowerSgdAllReduce(comm, gpu, { n: N, matrices: MATRICES }, RANK, SEED);
        equal(ar.matrices.map((m) => m.name).join(), 'w1,w3', 'the matrices worth compressing');
        const res = [await ar.allReduce(grads(0, comm.rank)), await ar.allReduce(grads(1, comm.rank))];
        ar.release();
        return res;
      });
      for (const [t, out] of outs[0].entries()) {
        for (const o of outs) ok(o[t].every((v, i) => Object.is(v, out[i])), `p=${p} step ${t}: ranks agree`);
      }
      // The reference: residuals e_r and warm-started Q per matrix, as Algorithm 1 carries them.
      const compressed = [MATRICES[0], MATRICES[2]];
      const e = [...Array(p)].map(() => compressed.map((m) => new Float64Array(m.rows * m.cols)));
      let qs: Float64Array[] = compressed.map((m, i) => Float64Array.from(powerSgdInitialQ(m.cols, RANK, SEED + i)));
      for (let t = 0; t < 2; t++) {
        const want = new Float64Array(N);
        for (let r = 0; r < p; r++) grads(t, r).forEach((v, i) => (want[i] += v / p));
        compressed.forEach((m, k) => {
          const size = m.rows * m.cols, ms = e.map((er, r) => er[k].map((v, i) => v + grads(t, r)[m.offset + i]));
          const mean = new Float64Array(size).map((_, i) => ms.reduce((a, x) => a + x[i], 0) / p);
          const ref = powerSgdRef(mean, qs[k], m.rows, m.cols, RANK);
          want.set(ref.d, m.offset);
          ms.forEach((x, r) => (e[r][k] = x.map((v, i) => v - ref.d[i])));
          qs = qs.map((q, j) => (j === k ? ref.q : q));
        });
        assertRelRms(outs[0][t], want, `p=${p} step ${t}`, 1e-4);
        const rest = [...Array(N).keys()].filter((i) =>
          !compressed.some((m) => i >= m.offset && i < m.offset + m.rows * m.cols)
        );
        for (const i of rest) ok(Math.abs(outs[0][t][i] - want[i]) <= 1e-6, `p=${p} step ${t}: uncompressed [${i}]`);
      }
      const rest = N - compressed.reduce((s, m) => s + m.rows * m.cols, 0);
      for (const c of world) {
        const words = c.tracer.spans.filter((s) => s.kind === 'send').reduce((a, s) => a + s.bytes / 4, 0);
        equal(words, 2 * powerSgdTraffic(compressed, RANK, rest, p, c.rank).elements, `p=${p} rank ${c.rank}: words`);
      }
    } finally {
      closeLocalWorld(world);
    }
  }
});
