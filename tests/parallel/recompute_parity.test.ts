/**
 * Activation recomputation under the mesh trainer (docs/design.md#activation-recomputation): full and selective
 * recomputation on GPT plans with tensor, sequence and context parallelism match the single-rank
 * run without recomputation (mesh_harness.ts checkMeshRun: losses within 1e-4 relative, gradients,
 * parameters), and every rank's traffic equals cost.ts stepTraffic with `recompute` exactly — the
 * repeated forward collectives of the recomputed blocks (full) or attention cores (selective)
 * included.
 */
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { testGpu } from '../util/gpu.ts';
import { oddVocabText, singleRankRun } from './single_rank.ts';
import { plainConfig } from './mesh_rank.ts';
import { checkMeshRun, localMeshRun } from './mesh_harness.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { TrainConfig } from '../../src/train/config.ts';

const TEXT_ODD = oddVocabText(TEXT);

Deno.test({
  name:
    'recompute full / selective on gpt dp2×tp2, tp2+sp, cp2 ring×tp2 and cp2 Ulysses match the single-rank run; traffic exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const runs: [string, Partial<ParallelPlan>, Partial<TrainConfig>][] = [
      ['dp2×tp2 full', { dp: 2, tp: 2 }, { recompute: 'full' }],
      ['dp2×tp2 selective (naive attention)', { dp: 2, tp: 2 }, { recompute: 'selective', attention: 'naive' }],
      ['tp2+sp full', { tp: 2, sp: true }, { recompute: 'full' }],
      ['cp2 ring×tp2 full', { cp: 2, tp: 2 }, { recompute: 'full' }],
      ['cp2 Ulysses selective', { cp: 2, cpKind: 'ulysses' }, { recompute: 'selective' }],
    ];
    for (const [what, p, extra] of runs) {
      const over = tinyConfig(extra), plan = makePlan(p);
      const ref = await singleRankRun(gpu, plainConfig({ ...over, recompute: 'none' }), TEXT_ODD);
      checkMeshRun(what, plan, over, await localMeshRun(gpu, plan, over, TEXT_ODD), ref);
    }
  },
});
