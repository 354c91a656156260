/**
 * Compressed collectives (src/comm/compressed.ts) over an in-thread world sharing one GPU, on
 * ragged sizes and group sizes 2 and 3: every rank decodes the same values; they equal the f64
 * references of the compressors applied as the two-phase algorithm prescribes (f32 sums in rank
 * order); the words each rank sends, read from its send spans, equal compressed_cost.ts exactly;
 * error feedback over steps keeps Σ outputs + residuals = Σ inputs.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { randn } from '../util/assert.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import { CompressedComm, compressorFor } from '../../src/comm/compressed.ts';
import { type CompressedCall, compressedTraffic } from '../../src/comm/compressed_cost.ts';
import { parseScheme, type Scheme, schemeWords, topKOf } from '../../src/comm/compression.ts';
import { bf16RoundRef } from '../../src/reference/cast.ts';
import { int4Ref, int8Ref, signRef, topKRef } from '../../src/reference/compress.ts';

/** D(C(v)) by the f64 references. */
function cdRef(s: Scheme, v: Float32Array): Float32Array {
  const x = Float64Array.from(v);
  const y = s.kind === 'fp16'
    ? x.map((a) => Math.f16round(a))
    : s.kind === 'bf16'
    ? bf16RoundRef(x)
    : s.kind === 'int8'
    ? int8Ref(x, s.block).y
    : s.kind === 'int4'
    ? int4Ref(x, s.block).y
    : s.kind === 'sign'
    ? signRef(x).y
    : s.kind === 'topk'
    ? topKRef(x, topKOf(x.length, s.density)).y
    : x;
  return Float32Array.from(y);
}

/** The two-phase allReduce (sum) of `xs` (one per rank) by the references. */
function allReduceRef(s: Scheme, xs: Float32Array[]): Float32Array {
  const p = xs.length, n = xs[0].length, c = Math.ceil(n / p), out = new Float32Array(p * c);
  for (let j = 0; j < p; j++) {
    const acc = new Float32Array(c);
    for (const x of xs) {
      const chunk = new Float32Array(c);
      chunk.set(x.subarray(j * c, Math.min(n, (j + 1) * c)));
      cdRef(s, chunk).forEach((v, i) => (acc[i] = Math.fround(acc[i] + v)));
    }
    out.set(cdRef(s, acc), j * c);
  }
  return out.subarray(0, n);
}

/** Elementwise within f32 rounding of the result's scale; an int8/int4 quotient near a tie (GPU division) may move one step. */
function assertNear(s: Scheme, got: Float32Array, want: Float32Array, what: string): void {
  equal(got.length, want.length, `${what}: length`);
  const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  let off = 0;
  for (let i = 0; i < want.length; i++) {
    if (Math.abs(got[i] - want[i]) > 1e-5 * Math.abs(want[i]) + 1e-6 * scale) off++;
  }
  ok(
    off <= (s.kind === 'int8' || s.kind === 'int4' ? 2 : 0),
    `${what}: ${off} of ${want.length} values off the reference`,
  );
}

/** Words each rank sent in its send spans. */
const sentWords = (c: Communicator) =>
  c.tracer.spans.filter((sp) => sp.kind === 'send').reduce((a, sp) => a + sp.bytes / 4, 0);

/** Runs `fn` on a traced world of p ranks with one CompressedComm each; checks the words sent per rank. */
async function onWorld<T>(
  gpu: Gpu,
  p: number,
  s: Scheme,
  call: CompressedCall,
  n: number,
  fn: (cc: CompressedComm) => Promise<T>,
): Promise<T[]> {
  const world = localWorld(p, { trace: true });
  try {
    const res = await onEveryRank(world, (c) => fn(new CompressedComm(c, gpu, s)));
    world.forEach((c) =>
      equal(sentWords(c), compressedTraffic(call, s, n, p, c.rank).elements, `${call} rank ${c.rank}`)
    );
    return res;
  } finally {
    closeLocalWorld(world);
  }
}

const schemes = (gpu: Gpu) =>
  ['bf16', 'int8:32', 'int4:32', 'sign', 'topk:0.05', ...(hasShaderF16(gpu) ? ['fp16'] : [])].map(
    parseScheme,
  );

gpuTest(
  'compressed allReduce: ranks agree, values match the two-phase reference, words match the formula',
  async (gpu) => {
    for (const s of schemes(gpu)) {
      for (const p of [2, 3]) {
        for (const n of [1, 7, 1000, 4099]) {
          const xs = [...Array(p)].map((_, r) => Float32Array.from(randn(n, 100 * r + n)));
          const out = await onWorld(gpu, p, s, 'allReduce', n, (cc) => cc.allReduce(xs[cc.comm.rank].slice()));
          const what = `${s.kind} p=${p} n=${n}`;
          equal(
            compressorFor(s).wireBytes(n),
            4 * schemeWords(s, n),
            `${what}: the formula's words are the compressor's`,
          );
          for (const o of out) ok(o.every((v, i) => Object.is(v, out[0][i])), `${what}: ranks decode the same values`);
          assertNear(s, out[0], allReduceRef(s, xs), what);
        }
      }
    }
  },
);

gpuTest('compressed avg is the sum over p; one rank sends and compresses nothing', async (gpu) => {
  const s = parseScheme('int8:64'), n = 515, xs = [0, 1].map((r) => Float32Array.from(randn(n, 7 + r)));
  const [avg] = await onWorld(gpu, 2, s, 'allReduce', n, (cc) => cc.allReduce(xs[cc.comm.rank].slice(), { op: 'avg' }));
  const sum = allReduceRef(s, xs);
  ok(avg.every((v, i) => Math.abs(v - sum[i] / 2) <= 0.02 * Math.abs(sum[i]) + 0.02), 'avg ≈ sum / 2 (int8 steps)');
  const x = Float32Array.from(randn(9, 1));
  const [same] = await onWorld(gpu, 1, s, 'allReduce', 9, (cc) => cc.allReduce(x));
  ok(same === x, 'one rank: the input comes back untouched');
});

gpuTest('compressed reduceScatter, allGather, allToAll and send/recv against the references', async (gpu) => {
  const p = 3, c = 333, n = p * c;
  for (const s of [parseScheme('int8:64'), parseScheme('int4:64'), parseScheme('bf16')]) {
    const xs = [...Array(p)].map((_, r) => Float32Array.from(randn(n, 40 + r)));
    const rs = await onWorld(gpu, p, s, 'reduceScatter', n, (cc) => cc.reduceScatter(xs[cc.comm.rank].slice()));
    rs.forEach((got, r) => {
      const acc = new Float32Array(c);
      for (const x of xs) cdRef(s, x.slice(r * c, (r + 1) * c)).forEach((v, i) => (acc[i] = Math.fround(acc[i] + v)));
      assertNear(s, got, acc, `${s.kind} reduceScatter rank ${r}`);
    });
    const small = xs.map((x) => x.slice(0, c));
    const ag = await onWorld(gpu, p, s, 'allGather', n, (cc) => cc.allGather(small[cc.comm.rank]));
    const agRef = new Float32Array(n);
    small.forEach((x, r) => agRef.set(cdRef(s, x), r * c));
    ag.forEach((got, r) => assertNear(s, got, agRef, `${s.kind} allGather rank ${r}`));
    const a2a = await onWorld(gpu, p, s, 'allToAll', n, (cc) => cc.allToAll(xs[cc.comm.rank]));
    a2a.forEach((got, r) => {
      const want = new Float32Array(n);
      xs.forEach((x, q) => want.set(cdRef(s, x.slice(r * c, (r + 1) * c)), q * c));
      assertNear(s, got, want, `${s.kind} allToAll rank ${r}`);
    });
    const msg = xs[0].slice(0, 101);
    const world = localWorld(2, { trace: true });
    try {
      const [, got] = await onEveryRank(world, async (comm) => {
        const cc = new CompressedComm(comm, gpu, s);
        if (comm.rank === 0) return void await cc.send(msg, 1);
        return await cc.recv(new Float32Array(101), 0);
      });
      assertNear(s, got as Float32Array, cdRef(s, msg), `${s.kind} send/recv`);
      equal(sentWords(world[0]), schemeWords(s, 101), "send: one message of the scheme's words");
    } finally {
      closeLocalWorld(world);
    }
  }
});

gpuTest('error feedback through the collective: Σ outputs + residuals = Σ inputs over steps', async (gpu) => {
  for (const s of [parseScheme('topk:0.05'), parseScheme('sign')]) {
    const p = 2, n = 999, steps = 6, c = Math.ceil(n / p);
    const drift = randn(n, 3);
    const inputs = (t: number, r: number) => Float32Array.from(randn(n, 500 + 10 * t + r), (v, i) => v + drift[i]);
    const world = localWorld(p);
    try {
      const res = await onEveryRank(world, async (comm) => {
        const cc = new CompressedComm(comm, gpu, s);
        const out = new Float64Array(n);
        for (let t = 0; t < steps; t++) {
          const y = await cc.allReduce(inputs(t, comm.rank), { name: 'g' });
          y.forEach((v, i) => (out[i] += v));
        }
        const mine = [...Array(p).keys()].map((j) => cc.residual(`g/${j}`)!);
        const e1 = new Float64Array(p * c);
        for (let j = 0; j < p; j++) (await gpu.read(mine[j])).forEach((v, i) => (e1[j * c + i] = v));
        const e2 = await gpu.read(cc.residual('g/reduced/0')!);
        return { out, e1, e2 };
      });
      const total = new Float64Array(n);
      for (let t = 0; t < steps; t++) for (let r = 0; r < p; r++) inputs(t, r).forEach((v, i) => (total[i] += v));
      let worst = 0;
      for (let i = 0; i < n; i++) {
        const j = Math.floor(i / c), e2 = res[j].e2[i - j * c];
        const lhs = res[0].out[i] + e2 + res.reduce((a, r) => a + r.e1[i], 0);
        worst = Math.max(worst, Math.abs(lhs - total[i]) / (1 + Math.abs(total[i])));
      }
      ok(worst < 1e-4, `${s.kind}: Σ out + e₂ + Σ_r e₁ vs Σ x, worst relative ${worst}`);
      ok(res[0].out.some((v, i) => Math.abs(v - total[i]) > 1e-3), `${s.kind}: compression dropped something`);
    } finally {
      closeLocalWorld(world);
    }
  }
});
