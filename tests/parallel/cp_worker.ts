/**
 * Test-only rank worker for context parallelism: `attn` runs one ring / Ulysses attention call
 * (forward, then backward of a given dy) on the rank's rows of a seeded random qkv (the
 * context-parallel GPT itself runs in the mesh trainer's tests).
 */
import { serveRank } from '../../src/comm/launch.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { collectiveOp } from '../../src/autograd/collective.ts';
import { cpPositions } from '../../src/parallel/context/context_parallel.ts';
import { ringAttention } from '../../src/parallel/context/ring_attention.ts';
import { ulyssesAttention } from '../../src/parallel/context/ulysses.ts';
import { subGroup } from '../../src/parallel/data/data_parallel.ts';
import { TrafficMeter } from '../../src/parallel/mesh/traffic.ts';
import { randn } from '../util/assert.ts';
import type { AttnArgs, AttnResult } from './cp_harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

/** Rows `pos` of every sequence of a (B, T, w) array. */
function rows(a: ArrayLike<number>, b: number, t: number, w: number, pos: Int32Array): Float32Array {
  const out = new Float32Array(b * pos.length * w);
  for (let i = 0; i < b; i++) {
    for (const [j, p] of pos.entries()) {
      for (let x = 0; x < w; x++) out[(i * pos.length + j) * w + x] = a[(i * t + p) * w + x];
    }
  }
  return out;
}

serveRank({
  ...RANK_GPU_TASKS,
  async attn(world, a: AttnArgs): Promise<AttnResult> {
    const g = await rankGpu();
    const cp = world.size, pos = cpPositions(a.kind, world.rank, cp, a.t), tl = pos.length;
    const qkv = g.upload(rows(randn(a.b * a.t * 3 * a.c, a.seed), a.b, a.t, 3 * a.c, pos), [a.b, tl, 3 * a.c]);
    const dy = rows(randn(a.b * a.t * a.c, a.seed + 1), a.b, a.t, a.c, pos);
    const group = subGroup(world, 'attn'), meter = TrafficMeter.of(world);
    meter.take();
    const tape = new Tape(g);
    tape.requireGrad(qkv);
    const dims = { b: a.b, t: tl, c: a.c, nh: a.nh, causal: a.causal };
    const y = a.kind === 'ring'
      ? await ringAttention(tape, qkv, dims, group)
      : await ulyssesAttention(tape, qkv, dims, group);
    const sentForward = meter.take();
    const yHost = (await g.read(y)) as Float32Array;
    // A local identity whose backward hands the given dy to y.
    await collectiveOp(tape, y, y.shape, 'seed_dy', (x) => Promise.resolve(x), () => Promise.resolve(dy));
    await tape.backwardAsync(RULES);
    const dqkv = (await g.read(tape.gradOf(qkv)!)) as Float32Array;
    const sentBackward = meter.take();
    tape.dispose();
    qkv.release();
    return { pos: [...pos], y: yHost, dqkv, sentForward, sentBackward };
  },
});
