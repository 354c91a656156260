/**
 * The pieces of tensor parallelism on their own: parameter sharding (q/k/v head blocks,
 * padded vocabulary), every tp_comm.ts mapping's forward and conjugate backward on a local
 * world of 2 ranks, and the vocab-parallel cross-entropy against an f64 reference (whose
 * gradient is first checked by finite differences) with a padded column that must never win.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertThrows } from '../util/assert.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { collectiveOp } from '../../src/autograd/collective.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { shardKind, shardParam, shardShape, unshardParam } from '../../src/parallel/tensor/tp_table.ts';
import * as M from '../../src/parallel/tensor/tp_comm.ts';
import { vocabParallelCrossEntropy, vocabShard } from '../../src/parallel/tensor/vocab_parallel.ts';
import { isSequenceParallelPartial } from '../../src/parallel/tensor/sequence_parallel.ts';

const iota = (n: number, from = 0) => Float32Array.from({ length: n }, (_, i) => from + i);

Deno.test('shards: q/k/v head rows, row/column splits and the padded vocabulary invert', () => {
  const C = 4, tp = 2;
  // c_attn (3C, C): rank 1 holds rows 2-3 of q, of k and of v.
  const qkv = iota(3 * C * C);
  const s1 = shardParam('qkv', qkv, [3 * C, C], tp, 1);
  deepStrictEqual([...s1.slice(0, 2 * C)], [...qkv.slice(2 * C, 4 * C)], 'q rows 2-3');
  deepStrictEqual([...s1.slice(2 * C, 4 * C)], [...qkv.slice(6 * C, 8 * C)], 'k rows 2-3');
  deepStrictEqual([...s1.slice(4 * C)], [...qkv.slice(10 * C, 12 * C)], 'v rows 2-3');
  deepStrictEqual(shardShape('cols', [C, 4 * C], tp), [C, 2 * C]);
  deepStrictEqual([...shardParam('cols', iota(2 * 4), [2, 4], tp, 1)], [2, 3, 6, 7], 'columns 2-3 of each row');
  // V = 5 padded to 6: rank 1 holds rows 3, 4 and a zero padding row.
  const wte = iota(5 * 2, 1);
  deepStrictEqual([...shardParam('vocab', wte, [5, 2], tp, 1)], [7, 8, 9, 10, 0, 0]);
  for (
    const [kind, shape] of [['qkv', [3 * C, C]], ['qkv', [3 * C]], ['rows', [4 * C, C]], ['cols', [C, 4 * C]], [
      'vocab',
      [5, 2],
    ], ['replicated', [C]]] as const
  ) {
    const full = iota(shape.reduce((a, b) => a * b, 1), 1);
    const back = unshardParam(kind, [0, 1].map((r) => shardParam(kind, full, shape, tp, r)), shape);
    deepStrictEqual(back, full, `${kind} [${shape}] round trip`);
  }
  equal(shardKind('transformer.h.3.attn.c_proj.bias'), 'replicated', 'row-parallel bias is replicated');
  equal(shardKind('transformer.h.3.mlp.c_proj.weight'), 'cols');
  ok(isSequenceParallelPartial('transformer.h.0.ln_2.bias') && isSequenceParallelPartial('transformer.wpe.weight'));
  ok(!isSequenceParallelPartial('transformer.h.0.mlp.c_fc.bias'), 'column-parallel biases see every row');
  assertThrows(() => shardShape('rows', [6, 2], 4), 'not divisible by tp 4');
  deepStrictEqual(vocabShard(65, 2, 1), { start: 33, rows: 33, valid: 32 });
  assertThrows(() => vocabShard(65, 2, 2), '0 ≤ rank < tp');
});

/**
 * Runs y = fn(x_r) on both ranks with x_r = iota + 100·r, then backward with the terminal
 * gradient dy_r = iota·(r+1) (a seed op whose backward returns it); returns y and dx per rank.
 */
async function mapping(
  gpu: Gpu,
  rows: number,
  c: number,
  fn: (tape: Tape, x: Tensor, g: Communicator) => Promise<Tensor>,
) {
  const world = localWorld(2);
  try {
    return await onEveryRank(world, async (g) => {
      const tape = new Tape(gpu);
      const x = gpu.upload(iota(rows * c, 100 * g.rank), [rows, c]);
      tape.requireGrad(x);
      const y = await fn(tape, x, g);
      const dy = iota(y.size).map((v) => v * (g.rank + 1));
      await collectiveOp(tape, y, [1], 'seed', () => Promise.resolve(new Float32Array(1)), () => Promise.resolve(dy));
      const yHost = await gpu.read(y) as Float32Array;
      await tape.backwardAsync(RULES);
      const dx = await gpu.read(tape.gradOf(x)!) as Float32Array;
      tape.dispose();
      x.release();
      return { y: [...yHost], dx: [...dx] };
    });
  } finally {
    closeLocalWorld(world);
  }
}

gpuTest('tp_comm mappings: forward and conjugate backward on 2 ranks', async (gpu) => {
  const n = 4,
    c = 3,
    x = (r: number) => [...iota(n * c, 100 * r)],
    dy = (len: number, r: number) => [...iota(len)].map((v) => v * (r + 1));
  const sum = (a: number[], b: number[]) => a.map((v, i) => v + b[i]);
  // f: identity forward, allReduce backward.
  let res = await mapping(gpu, n, c, M.copyToTensorParallelRegion);
  for (const r of [0, 1]) deepStrictEqual(res[r], { y: x(r), dx: sum(dy(n * c, 0), dy(n * c, 1)) });
  // g: allReduce forward, identity backward.
  res = await mapping(gpu, n, c, M.reduceFromTensorParallelRegion);
  for (const r of [0, 1]) deepStrictEqual(res[r], { y: sum(x(0), x(1)), dx: dy(n * c, r) });
  // SP gather: (n, c) → (2n, c) in rank order; backward reduce-scatters to this rank's rows.
  res = await mapping(gpu, n, c, M.gatherFromSequenceParallelRegion);
  const dsum = sum(dy(2 * n * c, 0), dy(2 * n * c, 1));
  for (const r of [0, 1]) {
    deepStrictEqual(res[r], { y: [...x(0), ...x(1)], dx: dsum.slice(r * n * c, (r + 1) * n * c) });
  }
  // SP reduce-scatter: (n, c) → (n/2, c) of the sum; backward all-gathers.
  res = await mapping(gpu, n, c, M.reduceScatterToSequenceParallelRegion);
  const half = (n / 2) * c;
  for (const r of [0, 1]) {
    deepStrictEqual(res[r], {
      y: sum(x(0), x(1)).slice(r * half, (r + 1) * half),
      dx: [...dy(half, 0), ...dy(half, 1)],
    });
  }
  // Scatter: split forward, all-gather backward.
  res = await mapping(gpu, n, c, M.scatterToSequenceParallelRegion);
  for (const r of [0, 1]) {
    deepStrictEqual(res[r], { y: x(r).slice(r * half, (r + 1) * half), dx: [...dy(half, 0), ...dy(half, 1)] });
  }
  // Local rows: split forward, zero-padded backward, nothing sent.
  res = await mapping(gpu, n, c, M.localSequenceRows);
  for (const r of [0, 1]) {
    const dx = new Array(n * c).fill(0);
    dx.splice(r * half, half, ...dy(half, r));
    deepStrictEqual(res[r], { y: x(r).slice(r * half, (r + 1) * half), dx });
  }
  await assertRejectsWith(mapping(gpu, 3, c, M.reduceScatterToSequenceParallelRegion), 'do not split over the 2 ranks');
});

/** f64 mean cross-entropy of logits (N, V) and its gradient (softmax − onehot)/N. */
function ceRef(z: Float64Array, y: number[], v: number): { loss: number; grad: Float64Array } {
  const n = y.length, grad = new Float64Array(n * v);
  let loss = 0;
  for (let i = 0; i < n; i++) {
    const row = z.subarray(i * v, (i + 1) * v), m = Math.max(...row);
    const s = row.reduce((a, x) => a + Math.exp(x - m), 0);
    loss += Math.log(s) + m - row[y[i]];
    for (let j = 0; j < v; j++) grad[i * v + j] = (Math.exp(row[j] - m) / s - (j === y[i] ? 1 : 0)) / n;
  }
  return { loss: loss / n, grad };
}

gpuTest('vocab-parallel cross-entropy equals the full softmax; padded columns never win', async (gpu) => {
  const V = 5, n = 3, targets = [4, 0, 2], scale = 0.5;
  const z = Float64Array.from({ length: n * V }, (_, i) => Math.sin(3.1 * i) * 2);
  const ref = ceRef(z, targets, V);
  assertFiniteDiff((x) => ceRef(x, targets, V).loss, z.slice(), ref.grad, 'f64 cross-entropy gradient');
  const world = localWorld(2);
  try {
    const out = await onEveryRank(world, async (g) => {
      const sh = vocabShard(V, 2, g.rank); // 3 columns each; rank 1's last is padding
      const local = new Float32Array(n * sh.rows).fill(1e4); // padding would dominate if it counted
      for (let i = 0; i < n; i++) for (let j = 0; j < sh.valid; j++) local[i * sh.rows + j] = z[i * V + sh.start + j];
      const tape = new Tape(gpu);
      const logits = gpu.upload(local, [n, sh.rows]);
      tape.requireGrad(logits);
      const { loss, value } = await vocabParallelCrossEntropy(tape, logits, Int32Array.from(targets), sh, V, g, scale);
      const lossHost = await gpu.read(loss) as Float32Array;
      await tape.backwardAsync(RULES);
      const d = await gpu.read(tape.gradOf(logits)!) as Float32Array;
      tape.dispose();
      logits.release();
      return { value, lossHost: [...lossHost], d: [...d], sh };
    });
    for (const o of out) {
      ok(Math.abs(o.value - ref.loss) < 1e-5 * Math.abs(ref.loss), `loss ${o.value} vs ${ref.loss}`);
      deepStrictEqual([Math.fround(o.value), n], o.lossHost, 'loss tensor = [mean, count]');
    }
    const full: number[] = [];
    for (let i = 0; i < n; i++) for (const o of out) full.push(...o.d.slice(i * o.sh.rows, i * o.sh.rows + o.sh.valid));
    assertClose(full, [...ref.grad].map((x) => x * scale), 'gathered dlogits = gradScale·(softmax − onehot)/N');
    for (let i = 0; i < n; i++) equal(out[1].d[i * 3 + 2], 0, 'no gradient into the padded column');
    await assertRejectsWith(
      onEveryRank(world, (g) =>
        vocabParallelCrossEntropy(
          new Tape(gpu),
          gpu.zeros([n, 3]),
          Int32Array.from([5, 0, 0]),
          vocabShard(V, 2, g.rank),
          V,
          g,
        )),
      'target 5 ≥ vocabulary 5',
    );
  } finally {
    closeLocalWorld(world);
  }
});

async function assertRejectsWith(p: Promise<unknown>, part: string): Promise<void> {
  let msg = '';
  try {
    await p;
  } catch (e) {
    msg = String(e);
  }
  ok(msg.includes(part), `expected an error containing '${part}', got '${msg}'`);
}
