/**
 * A `--sync` run resumed from its rank checkpoint files, as the CLI writes and reads them
 * (src/io/checkpoint_set.ts: ckpt-parallel.json + ckpt-parallel-<step>/rank-<r>.safetensors, each
 * rank's file from src/parallel/run/run.ts `RankRun.checkpoint`): 8 steps of dp 2, saved after step 4
 * — between two outer syncs, after one has landed, with a Streaming DiLoCo fragment and a CO2 round in flight —
 * then a fresh world opened from the files on disk runs steps 4–7. Its losses, and every tensor of
 * its final rank files (parameters, inner optimizer, the outer θ_global anchor, outer momentum,
 * results in flight and their due steps), equal the uninterrupted run's bit for bit.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { loadCheckpointSet, saveCheckpointSet } from '../../src/io/checkpoint_set.ts';
import { syncSpecOf } from '../../src/parallel/data/low_comm.ts';
import { makePlan, type ParallelPlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { decodeRankState } from '../../src/parallel/run/rank_checkpoint.ts';
import { RankRun } from '../../src/parallel/run/run.ts';
import { testBackend } from '../util/gpu.ts';
import { TEXT, tinyConfig } from './harness.ts';

const TEST = { sanitizeResources: false, sanitizeOps: false };
const STEPS = 8, CUT = 4;
const cfg = tinyConfig({ steps: STEPS, evalInterval: 100, evalBatches: 1, batchSize: 8 });

/** Runs `plan` (from `resume`, every rank's file, or from scratch) to the end; every rank's losses and its files after `saveAt` steps. */
async function run(plan: ParallelPlan, saveAt: number[], resume?: Uint8Array[]) {
  const world = localWorld(planWorldSize(plan), { timeoutMs: 120_000 });
  try {
    const settled = await Promise.allSettled(world.map(async (c) => {
      const r = await RankRun.open(c, {
        plan,
        cfg,
        data: { text: TEXT },
        resume: resume?.[c.rank],
        backend: testBackend(),
      });
      try {
        const losses: number[] = [], files = new Map<number, Uint8Array>();
        if (saveAt.includes(r.next)) files.set(r.next, await r.checkpoint());
        while (r.next < STEPS) {
          losses.push((await r.step()).loss);
          if (saveAt.includes(r.next)) files.set(r.next, await r.checkpoint());
        }
        return { losses, files };
      } finally {
        await r.close();
      }
    }));
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((s) =>
      (s as PromiseFulfilledResult<{ losses: number[]; files: Map<number, Uint8Array> }>).value
    );
  } finally {
    closeLocalWorld(world);
  }
}

const SPECS = [
  { sync: 'diloco', innerSteps: 3 },
  { sync: 'local-sgd', innerSteps: 3 },
  { sync: 'streaming-diloco', innerSteps: 4, fragments: 2, overlapSteps: 1 },
  { sync: 'co2', innerSteps: 2, outerClip: 1 },
];

for (const o of SPECS) {
  Deno.test({
    name:
      `low-comm ${o.sync}: resumed from the rank files on disk after ${CUT} of ${STEPS} steps, equal to the uninterrupted run`,
    ...TEST,
    fn: async () => {
      const plan = makePlan({ dp: 2, sync: syncSpecOf(o as Parameters<typeof syncSpecOf>[0]) });
      const whole = await run(plan, [0, CUT, STEPS]);
      const dir = await Deno.makeTempDir({ prefix: 'low-comm-resume-' });
      try {
        await saveCheckpointSet(dir, CUT, whole.map((r) => r.files.get(CUT)!), plan, false);
        const { manifest, shards } = await loadCheckpointSet(dir);
        equal(manifest.step, CUT);
        const saved = await decodeRankState(shards[0], 'rank 0');
        for (const k of ['outer.global', 'outer.momentum', 'outer.pending', 'outer.start', 'outer.due']) {
          ok(saved.tensors.has(k), `${o.sync}: the rank file holds ${k}`);
        }
        // By the cut an outer step has landed: the anchor has left the initial weights (and, with outer
        // momentum, the momentum is non-zero), so a resume that dropped either would start elsewhere.
        const initial = (await decodeRankState(whole[0].files.get(0)!, 'rank 0 at step 0')).tensors.get('params')!;
        ok(
          saved.tensors.get('outer.global')!.some((v, i) => v !== initial[i]),
          `${o.sync}: θ_global moved by step ${CUT}`,
        );
        const spec = plan.sync!;
        if (spec.outerMomentum > 0) {
          ok(saved.tensors.get('outer.momentum')!.some((v) => v !== 0), `${o.sync}: momentum`);
        }
        const resumed = await run(plan, [STEPS], shards);
        for (let r = 0; r < 2; r++) {
          deepStrictEqual(
            resumed[r].losses,
            whole[r].losses.slice(CUT),
            `${o.sync} rank ${r}: losses of steps ${CUT}–7`,
          );
          const [a, b] = await Promise.all(
            [whole[r].files.get(STEPS)!, resumed[r].files.get(STEPS)!].map((f) => decodeRankState(f, `rank ${r}`)),
          );
          deepStrictEqual([...b.tensors.keys()].sort(), [...a.tensors.keys()].sort());
          for (const [k, v] of a.tensors) deepStrictEqual(b.tensors.get(k), v, `${o.sync} rank ${r}: ${k} at the end`);
        }
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}
