/**
 * Low-communication data parallelism (src/parallel/data/low_comm.ts, outer_sync.ts): the flags and
 * their refusals, the fragment schedule, DiLoCo and local SGD with H = 1 against DDP step for
 * step (SGD inner optimizer, the setting where the identity is exact), the outer traffic against
 * the formula, and resuming mid-way between outer steps. In-process ranks sharing one GPU.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { localMeshRun } from './mesh_harness.ts';
import { microConfig } from './mesh_rank.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { parseConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, planProblems, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { planFromOptions } from '../../src/parallel/plan/plan_schema.ts';
import { fragmentOf, outerSyncTraffic, syncsAt, type SyncSpec, syncSpecOf } from '../../src/parallel/data/low_comm.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import { gptParamSpecs } from '../../src/models/gpt.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { runCli } from '../util/cli.ts';

Deno.test('low-comm flags: defaults per method, and each refusal names the flag', () => {
  deepStrictEqual(syncSpecOf({ sync: 'ddp' }), undefined);
  const d = syncSpecOf({ sync: 'diloco' })!;
  deepStrictEqual([d.innerSteps, d.outerLr, d.outerMomentum, d.fragments, d.overlapSteps], [10, 0.7, 0.9, 1, 0]);
  const l = syncSpecOf({ sync: 'local-sgd', innerSteps: 4 })!;
  deepStrictEqual([l.outerLr, l.outerMomentum], [1, 0]);
  const st = syncSpecOf({ sync: 'streaming-diloco', innerSteps: 8, fragments: 4 })!;
  deepStrictEqual([st.fragments, st.overlapSteps, st.mixing], [4, 1, 0.5]);
  equal(syncSpecOf({ sync: 'co2', innerSteps: 6 })!.overlapSteps, 6);
  throws(() => syncSpecOf({ sync: 'local-sgd', outerLr: 0.5 }), /--sync local-sgd takes no --outer-lr/);
  throws(() => syncSpecOf({ sync: 'diloco', fragments: 2 }), /takes no --fragments/);
  throws(() => syncSpecOf({ innerSteps: 5 }), /--sync ddp takes no --inner-steps/);
  throws(() => syncSpecOf({ sync: 'streaming-diloco', innerSteps: 9, fragments: 2 }), /divisible by --fragments/);
  throws(
    () => syncSpecOf({ sync: 'streaming-diloco', innerSteps: 8, fragments: 4, overlapSteps: 2 }),
    /below H\/F = 2/,
  );
  const model = { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 8, vocabSize: 65 };
  const bad = (o: Record<string, unknown>) =>
    planProblems(planFromOptions({ sync: 'diloco', ...o }, { gradAccum: 1 }, 64), model);
  ok(bad({ dp: 1 }).some((p) => /needs dp ≥ 2/.test(p)));
  ok(bad({ dp: 2, zero: 1 }).some((p) => /needs zero 0/.test(p)));
  ok(bad({ dp: 2, cp: 2 }).some((p) => /needs cp 1/.test(p)));
  ok(bad({ dp: 2, compress: 'dp=int8' }).some((p) => /--outer-quant instead/.test(p)));
  deepStrictEqual(bad({ dp: 2, tp: 2, pp: 2 }), []);
});

Deno.test('low-comm schedule: fragments are strided layers, their syncs staggered by H/F', () => {
  deepStrictEqual(
    ['transformer.h.0.attn.c_attn.weight', 'transformer.h.3.mlp.c_fc.bias', 'transformer.wte.weight'].map((n) =>
      fragmentOf(n, 2)
    ),
    [0, 1, 0],
  );
  const spec = syncSpecOf({ sync: 'streaming-diloco', innerSteps: 4, fragments: 2, overlapSteps: 1 })!;
  deepStrictEqual([...Array(9).keys()].map((s) => syncsAt(spec, s)), [[], [1], [], [0], [], [1], [], [0], []]);
  const dil = syncSpecOf({ sync: 'diloco', innerSteps: 3 })!;
  deepStrictEqual([...Array(7).keys()].filter((s) => syncsAt(dil, s).length), [2, 5]);
});

/** Elements this rank sent on its outer group over a run (keys `…/outer…`). */
const outerSent = (sent: Record<string, number>[]) =>
  sent.reduce((a, s) => a + Object.entries(s).filter(([k]) => k.includes('/outer')).reduce((b, [, n]) => b + n, 0), 0);

Deno.test({
  name:
    'low-comm: DiLoCo and local SGD with H = 1 (outer lr 1, no momentum, SGD inner, no clipping) equal DDP step for step over 10 steps',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig({ optimizer: 'sgd', gradClip: 0, lr: 0.05, minLr: 0.05, batchSize: 8, steps: 10, seed: 5 });
    for (const base of [{ dp: 2 }, { dp: 2, tp: 2 }, { dp: 2, pp: 2 }] as Partial<ParallelPlan>[]) {
      const ddp = await localMeshRun(gpu, makePlan(base), over, TEXT);
      for (
        const sync of [{ sync: 'diloco', innerSteps: 1, outerLr: 1, outerMomentum: 0 }, {
          sync: 'local-sgd',
          innerSteps: 1,
        }]
      ) {
        const plan = makePlan({ ...base, sync: syncSpecOf(sync as Parameters<typeof syncSpecOf>[0]) });
        const run = await localMeshRun(gpu, plan, over, TEXT), what = `${JSON.stringify(base)} ${sync.sync}`;
        ddp[0].losses.forEach((l, s) =>
          ok(Math.abs(run[0].losses[s] - l) <= 1e-5 * Math.abs(l), `${what} step ${s}: ${run[0].losses[s]} vs ${l}`)
        );
        for (const [name, ref] of Object.entries(ddp[0].params)) {
          const got = run[0].params[name];
          ref.forEach((v, i) =>
            ok(Math.abs(got[i] - v) <= 1e-5 * (1 + Math.abs(v)), `${what} ${name}[${i}] ${got[i]} vs ${v}`)
          );
        }
        ok(outerSent(run[0].sent) > 0 && outerSent(ddp[0].sent) === 0, `${what}: the outer group carries the sync`);
      }
    }
  },
});

Deno.test({
  name: 'low-comm: with gradient clipping on, DiLoCo with H = 1 is not DDP (each worker clips its own gradient)',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    // gradClip 0.5 clips the first steps of this run (harness.ts): DDP clips the averaged gradient by its norm,
    // each DiLoCo worker its own, so docs/parallel.md's identity needs --grad-clip 0.
    const over = tinyConfig({ optimizer: 'sgd', gradClip: 0.5, batchSize: 8, steps: 4, seed: 5 });
    const ddp = await localMeshRun(gpu, makePlan({ dp: 2 }), over, TEXT);
    const spec = syncSpecOf({ sync: 'diloco', innerSteps: 1, outerLr: 1, outerMomentum: 0 });
    const run = await localMeshRun(gpu, makePlan({ dp: 2, sync: spec }), over, TEXT);
    const rel = Math.max(...ddp[0].losses.map((l, s) => Math.abs(run[0].losses[s] - l) / Math.abs(l)));
    ok(rel > 1e-5, `clipped runs differ beyond 1e-5: ${rel}`);
  },
});

/** The run's outer syncs of rank 0 of a dp-only plan: Σ over sync events of the formula for each fragment's elements. */
function expectedOuter(spec: SyncSpec, over: Partial<TrainConfig>, vocabSize: number, dp: number): number {
  const cfg = parseConfig(over), F = spec.fragments, n = new Array(F).fill(0);
  for (const p of gptParamSpecs({ ...cfg, vocabSize })) n[fragmentOf(p.name, F)] += p.shape.reduce((a, b) => a * b, 1);
  let total = 0;
  for (let s = 0; s < cfg.steps; s++) {
    const frags = s + 1 === cfg.steps ? [...Array(F).keys()] : syncsAt(spec, s);
    for (const f of frags) total += outerSyncTraffic(spec, n[f], dp, 0).elements;
  }
  return total;
}

Deno.test({
  name: 'low-comm: outer traffic equals the formula exactly (diloco fp32, streaming int4 and bf16, co2)',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu(), over = tinyConfig({ nLayer: 4, batchSize: 8, steps: 9 });
    const vocabSize = CharTokenizer.fromText(TEXT).vocabSize;
    const specs = [
      { sync: 'diloco', innerSteps: 3 },
      { sync: 'streaming-diloco', innerSteps: 4, fragments: 2, overlapSteps: 1, outerQuant: 'int4' },
      { sync: 'streaming-diloco', innerSteps: 4, fragments: 4, overlapSteps: 0, outerQuant: 'bf16' },
      { sync: 'co2', innerSteps: 3, outerClip: 1 },
    ];
    for (const o of specs) {
      const spec = syncSpecOf(o as Parameters<typeof syncSpecOf>[0])!, plan = makePlan({ dp: 2, sync: spec });
      const run = await localMeshRun(gpu, plan, over, TEXT);
      equal(outerSent(run[0].sent), expectedOuter(spec, over, vocabSize, 2), `${o.sync} ${JSON.stringify(o)}`);
      ok(run.every((r) => r.losses.every(Number.isFinite)), `${o.sync}: finite losses`);
      // The last step synchronises every fragment without overlap: one model on every worker.
      for (const [name, v] of Object.entries(run[0].params)) {
        deepStrictEqual(run[1].params[name], v, `${o.sync} ${name}`);
      }
    }
  },
});

/** Trains `plan` for `steps` steps on in-process ranks; with `cut`, saves every rank's state after `cut` steps and resumes into new trainers. */
async function trainWithCut(gpu: Gpu, plan: ParallelPlan, over: Partial<TrainConfig>, cut?: number) {
  const cfg = parseConfig(microConfig(plan, over)), tok = CharTokenizer.fromText(TEXT);
  const data = new TextDataset(tok.encode(TEXT), cfg.blockSize), world = localWorld(planWorldSize(plan));
  try {
    return await onEveryRank(world, async (comm) => {
      let t = new MeshTrainer(gpu, cfg, plan, comm, data, tok.vocabSize);
      const losses: number[] = [];
      for (let s = 0; s < cfg.steps; s++) {
        if (s === cut) {
          await t.outer!.settle();
          const saved = new Map<string, Float32Array>();
          for (const [k, v] of Object.entries(t.trainingState())) {
            saved.set(k, (await gpu.read(v) as Float32Array).slice());
          }
          t.destroy();
          t = new MeshTrainer(gpu, cfg, plan, comm, data, tok.vocabSize);
          for (const [k, v] of Object.entries(t.trainingState())) gpu.write(v, saved.get(k)!);
        }
        losses.push((await t.step(s)).loss);
      }
      const params = Object.fromEntries(await t.parameters());
      t.destroy();
      return { losses, params };
    });
  } finally {
    closeLocalWorld(world);
  }
}

Deno.test({
  name:
    'low-comm: resuming mid-way between outer steps (with a fragment in flight) is exact for diloco and streaming-diloco',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu(), over = tinyConfig({ batchSize: 8, steps: 8 });
    const specs = [
      { sync: 'diloco', innerSteps: 3 },
      { sync: 'streaming-diloco', innerSteps: 4, fragments: 2, overlapSteps: 1 },
      { sync: 'co2', innerSteps: 2, outerClip: 0.5 },
    ];
    for (const o of specs) {
      const plan = makePlan({ dp: 2, sync: syncSpecOf(o as Parameters<typeof syncSpecOf>[0]) });
      // Step 4 is cut between two outer steps; streaming's fragment 0 (launched at the end of step 3) is in flight then.
      const whole = await trainWithCut(gpu, plan, over), cut = await trainWithCut(gpu, plan, over, 4);
      for (let r = 0; r < 2; r++) {
        deepStrictEqual(cut[r].losses, whole[r].losses, `${o.sync} rank ${r} losses`);
        for (const [k, v] of Object.entries(whole[r].params)) {
          deepStrictEqual(cut[r].params[k], v, `${o.sync} rank ${r} ${k}`);
        }
      }
    }
  },
});

Deno.test({
  name:
    'low-comm CLI: a streaming int4 run validating every step counts every outer message (in-flight sends between steps too)',
  ...WORKER_TEST,
  fn: async () => {
    const out = await Deno.makeTempDir(), steps = 9;
    const shape = { nLayer: 4, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 8, steps };
    const flags = ['--sync', 'streaming-diloco', '--inner-steps', '4', '--fragments', '2', '--overlap-steps', '1'];
    const r = await runCli('train.ts', [
      ...['--dp', '2', ...flags, '--outer-quant', 'int4', '--eval-interval', '1', '--eval-batches', '1'],
      ...Object.entries(shape).flatMap(([k, v]) => [`--${k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())}`, `${v}`]),
      ...['--data', 'public/data/tinyshakespeare.txt', '--out', out],
    ]);
    equal(r.code, 0, r.stderr);
    const lines = (await Deno.readTextFile(`${out}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
    const sent = lines.filter((l) => l.sent_by_rank).map((l) => l.sent_by_rank[0] as Record<string, number>);
    equal(sent.length, steps);
    const spec = syncSpecOf({
      sync: 'streaming-diloco',
      innerSteps: 4,
      fragments: 2,
      overlapSteps: 1,
      outerQuant: 'int4',
    })!;
    const vocabSize = new Set(await Deno.readTextFile('public/data/tinyshakespeare.txt')).size;
    equal(outerSent(sent), expectedOuter(spec, shape, vocabSize, 2));
  },
});
