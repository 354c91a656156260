/**
 * The `collective` tape op in one process, with host maps standing in for the collectives:
 * forward output, gradient accumulation through backwardAsync, the conjugate always running
 * (zeros when no gradient reached y), and the synchronous backward refusing the tape.
 */
import { deepStrictEqual, equal, rejects, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { collectiveOp } from '../../src/autograd/collective.ts';
import { crossEntropy, linear } from '../../src/autograd/ops.ts';

gpuTest('collective op: forward on the host, dx += backward(dy) through backwardAsync', async (gpu) => {
  const w = gpu.upload([1, 2, 3, 4, 5, 6], [3, 2]); // (Cout 3, Cin 2)
  const dw = gpu.zeros([3, 2]);
  const x = gpu.upload([1, -1, 0.5, 2], [2, 2]); // (N 2, Cin 2)
  const targets = gpu.upload(new Int32Array([0, 2]), [2], 'i32');
  const calls: string[] = [];
  const tape = new Tape(gpu, new Map([[w, dw]]));
  const h = linear(tape, x, w, null); // (2, 3)
  // "Collective": y = 2h forward, dx = 2dy backward (the conjugate of a scaling is itself).
  const y = await collectiveOp(tape, h, [2, 3], 'double', (v) => {
    calls.push('fwd');
    return Promise.resolve(v.map((a) => 2 * a));
  }, (dy) => {
    calls.push('bwd');
    return Promise.resolve(dy.map((a) => 2 * a));
  });
  deepStrictEqual(Array.from(await gpu.read(y)), Array.from(await gpu.read(h)).map((a) => 2 * a));
  crossEntropy(tape, y, targets);
  throws(() => tape.backward(RULES), /collective \('double'\).*backwardAsync/);
  tape.dispose();

  // The same graph again, run with backwardAsync; compare with the chain rule done by hand.
  const tape2 = new Tape(gpu, new Map([[w, dw]]));
  const h2 = linear(tape2, x, w, null);
  const y2 = await collectiveOp(
    tape2,
    h2,
    [2, 3],
    'double',
    (v) => Promise.resolve(v.map((a) => 2 * a)),
    (dy) => Promise.resolve(dy.map((a) => 2 * a)),
  );
  crossEntropy(tape2, y2, targets);
  await tape2.backwardAsync(RULES);
  const logits = Array.from(await gpu.read(y2));
  const got = Array.from(await gpu.read(dw));
  const xs = [[1, -1], [0.5, 2]];
  const want = new Array(6).fill(0);
  [0, 2].forEach((tgt, n) => {
    const row = logits.slice(3 * n, 3 * n + 3);
    const m = Math.max(...row);
    const e = row.map((v) => Math.exp(v - m));
    const z = e.reduce((a, b) => a + b, 0);
    for (let o = 0; o < 3; o++) {
      const dlogit = (e[o] / z - (o === tgt ? 1 : 0)) / 2; // mean over 2 rows
      for (let i = 0; i < 2; i++) want[o * 2 + i] += 2 * dlogit * xs[n][i];
    }
  });
  got.forEach((g, i) => {
    if (Math.abs(g - want[i]) > 1e-5 + 1e-4 * Math.abs(want[i])) {
      throw new Error(`dw[${i}] = ${g}, expected ${want[i]}`);
    }
  });
  tape2.dispose();
  equal(calls.join(), 'fwd');
});

gpuTest('collective op: the conjugate runs with zeros when no gradient reached y; errors name the op', async (gpu) => {
  const w = gpu.upload([1, 2], [1, 2]);
  const dw = gpu.zeros([1, 2]);
  const x = gpu.upload([1, 1], [1, 2]);
  const tape = new Tape(gpu, new Map([[w, dw]]));
  const h = linear(tape, x, w, null);
  let seen: number[] | null = null;
  await collectiveOp(tape, h, [1], 'unused', (v) => Promise.resolve(v), (dy) => {
    seen = Array.from(dy);
    return Promise.resolve(dy);
  });
  await tape.backwardAsync(RULES); // nothing consumed y: its gradient is zero, yet peers still need the call
  deepStrictEqual(seen, [0]);
  deepStrictEqual(Array.from(await gpu.read(dw)), [0, 0]);
  tape.dispose();
  const t2 = new Tape(gpu, new Map([[w, dw]]));
  const h2 = linear(t2, x, w, null);
  await rejects(
    collectiveOp(t2, h2, [3], 'bad', (v) => Promise.resolve(v), (d) => Promise.resolve(d)),
    /bad: forward produced 1 elements for shape \[3\]/,
  );
  t2.dispose();
});
