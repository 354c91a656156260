/**
 * Parallel checkpoints (src/parallel/run/rank_checkpoint.ts): every rank saves its own state after
 * 2 of 4 steps; a fresh world restored from those files runs steps 2 and 3 with the same losses
 * and gradient norms as the uninterrupted run — for plain dp, ZeRO-3 (whose state is its pieces
 * and shard buffers), tp 2, pp 2 and ZeRO-2 over a pipeline. A file of another plan or rank, or
 * a damaged one, is refused with an error that says so. Under dp compression the files carry the
 * error-feedback residuals and PowerSGD's Q and residuals, so the resumed steps match too.
 */
import { equal, ok, rejects } from 'node:assert/strict';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { makePlan, type ParallelPlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { RankRun } from '../../src/parallel/run/run.ts';
import { decodeRankState } from '../../src/parallel/run/rank_checkpoint.ts';
import { parseCompressPolicy } from '../../src/comm/compression.ts';
import { TEXT, tinyConfig } from './harness.ts';
import { deviceImpl, testBackend } from '../util/gpu.ts';

const TEST = { sanitizeResources: false, sanitizeOps: false };
const cfg = tinyConfig({ steps: 4, evalInterval: 100, evalBatches: 1 });

interface Leg {
  losses: number[];
  norms: number[];
  files: Uint8Array[];
}

/** Runs `plan` from `resume` (every rank's file) or from scratch until `until`; collects each rank's file at `saveAt`. */
async function leg(
  plan: ParallelPlan,
  until: number,
  saveAt: number,
  resume?: Uint8Array[],
  timeoutMs = 60_000,
): Promise<Leg> {
  const world = localWorld(planWorldSize(plan), { timeoutMs });
  try {
    // Every rank settles, closing its device, before the leg returns: a Dawn device still open
    // when the process exits aborts it. A rank whose peer refused its file waits out timeoutMs.
    const settled = await Promise.allSettled(world.map(async (c) => {
      const run = await RankRun.open(c, {
        plan,
        cfg,
        data: { text: TEXT },
        resume: resume?.[c.rank],
        backend: testBackend(),
      });
      try {
        equal(deviceImpl(run.gpu), testBackend(), `rank ${c.rank}'s device`);
        const out = { losses: [] as number[], norms: [] as number[], file: null as Uint8Array | null };
        while (run.next < until) {
          const r = await run.step();
          out.losses.push(r.loss);
          out.norms.push(r.gradNorm);
          if (run.next === saveAt) out.file = await run.checkpoint();
        }
        return out;
      } finally {
        await run.close();
      }
    }));
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const per = settled.map((s) =>
      (s as PromiseFulfilledResult<{ losses: number[]; norms: number[]; file: Uint8Array | null }>).value
    );
    return { losses: per[0].losses, norms: per[0].norms, files: per.map((p) => p.file!) };
  } finally {
    closeLocalWorld(world);
  }
}

for (
  const [name, over] of [
    ['dp 2', { dp: 2 }],
    ['dp 2 · ZeRO-3', { dp: 2, zero: 3 }],
    ['tp 2', { tp: 2 }],
    ['pp 2', { pp: 2 }],
    ['dp 2 · tp 2 · ZeRO-3', { dp: 2, tp: 2, zero: 3 }],
    ['dp 2 · pp 2 · ZeRO-2', { dp: 2, pp: 2, zero: 2 }],
    ['dp 2 · top-k with error feedback', { dp: 2, compress: parseCompressPolicy('dp=topk:0.05') }],
    ['dp 2 · PowerSGD rank 2', { dp: 2, compress: parseCompressPolicy('dp=powersgd:2') }],
    ['dp 2 · ZeRO-2 · top-k', { dp: 2, zero: 2, compress: parseCompressPolicy('dp=topk:0.05') }],
  ] as const
) {
  Deno.test({
    name: `parallel checkpoint, ${name}: resuming after 2 of 4 steps reproduces steps 2 and 3`,
    ...TEST,
    fn: async () => {
      const plan = makePlan(over as Partial<ParallelPlan>);
      const whole = await leg(plan, 4, 2);
      equal(whole.files.length, planWorldSize(plan));
      const resumed = await leg(plan, 4, -1, whole.files);
      equal(resumed.losses.length, 2, 'the resumed run starts at step 2');
      if (plan.compress) {
        // The compression's residuals (and PowerSGD's warm-started Q) travel in the rank files.
        const keys = [...(await decodeRankState(whole.files[0], 'rank 0')).tensors.keys()];
        ok(keys.some((k) => k.startsWith('compress.dp.')), `compression state saved: ${keys}`);
      }
      for (let i = 0; i < 2; i++) {
        const [a, b] = [whole.losses[2 + i], resumed.losses[i]];
        ok(Math.abs(a - b) <= 1e-6 * Math.abs(a), `${name} step ${2 + i}: loss ${b} resumed vs ${a} uninterrupted`);
        ok(
          Math.abs(whole.norms[2 + i] - resumed.norms[i]) <= 1e-5 * whole.norms[2 + i],
          `${name} step ${2 + i}: grad norm`,
        );
      }
      // A resumed run that did not restore the optimizer state would drift: make sure it can fail.
      const fresh = await leg(plan, 2, -1);
      ok(Math.abs(fresh.losses[0] - resumed.losses[0]) > 1e-3, 'a fresh start differs from the resumed step 2');
    },
  });
}

Deno.test({
  name: 'parallel checkpoint: another plan, another rank and a damaged file are refused with what is wrong',
  ...TEST,
  fn: async () => {
    const dp = makePlan({ dp: 2 });
    const { files } = await leg(dp, 1, 1);
    await rejects(
      leg(makePlan({ dp: 2, zero: 1 }), 2, -1, files, 10_000),
      /written by 'dp 2 .* zero 0.*resume with the same plan/s,
    );
    // Both ranks refuse their swapped file; whichever error reaches the world first is reported.
    await rejects(
      leg(dp, 2, -1, [files[1], files[0]], 10_000),
      /rank ([01])'s checkpoint holds rank (?!\1)[01]'s state, loaded on rank \1/,
    );
    const damaged = files[0].slice();
    damaged[damaged.length - 3] ^= 0xff;
    await rejects(
      leg(dp, 2, -1, [damaged, files[1]], 10_000),
      /Corrupt checkpoint rank 0's checkpoint: contents do not match its SHA-256 'sha256'/,
    );
  },
});
