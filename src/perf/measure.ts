/**
 * Checking a plan before a run starts, and `npm run plan -- … --measure`'s one real step: the
 * plan's ranks as in-process ranks (src/comm/local.ts), the accounting of that step as text
 * (src/perf/plan_report.ts). The caller reads the data; nothing here touches the file system.
 */
import type { TrainConfig } from '../train/config.ts';
import type { Backend } from '../gpu/device.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../comm/local.ts';
import { type ParallelPlan, planWorldSize, type StrategyKind } from '../parallel/plan/plan.ts';
import { planModelOf, RankRun, type RankSummary } from '../parallel/run/run.ts';
import { combineRouting } from '../parallel/expert/moe_routing.ts';
import type { StepReport } from '../parallel/run/run_host.ts';
import { checkPlan } from '../parallel/plan/rules.ts';
import { runFactsOf } from '../parallel/plan/mesh_plan.ts';
import { MAX_RUN_WORLD } from '../parallel/plan/limits.ts';
import { accounting, accountingText } from './plan_report.ts';
import { simActionUs } from './action_prices.ts';

/**
 * Checks `plan` for `cfg` before anything starts, once, on the host: the plan's rules (one table,
 * src/parallel/plan/rules.ts) against the run's model and config, within a real run's maximum world. Ranks receive it
 * checked.
 * Returns the model and the trainer.
 * @throws Error naming every broken rule ("invalid parallel plan: …").
 */
export function checkRun(
  plan: ParallelPlan,
  cfg: TrainConfig,
  vocabSize: number,
): { model: ReturnType<typeof planModelOf>; kind: StrategyKind } {
  const model = planModelOf(plan, cfg, vocabSize);
  checkPlan(plan, model, undefined, runFactsOf(cfg), MAX_RUN_WORLD);
  return { model, kind: 'mesh' };
}

/**
 * `npm run plan -- … --measure`: one real optimizer step of `plan` in a world of in-process ranks
 * (src/comm/local.ts, each rank its own WebGPU device), returning the accounting text — memory
 * and elements per collective, measured beside predicted — and every rank's summary (its
 * memory.peakPool is the measured pool peak). `data` is the one training corpus, tokenised
 * (src/io/corpus.ts loadTrainingData); plan.ts parses the flags, reads the data and calls it.
 * @throws Error for a plan that cannot run (see {@link checkRun}) or a rank's failure.
 */
export async function measure(
  plan: ParallelPlan,
  cfg: TrainConfig,
  data: { tokens: Int32Array; vocabSize: number },
  backend: Backend = 'wgpu',
): Promise<{ text: string; ranks: RankSummary[] }> {
  const { model } = checkRun(plan, cfg, data.vocabSize);
  const world = localWorld(planWorldSize(plan), { timeoutMs: 120_000 });
  let ranks: RankSummary[];
  try {
    ranks = await onEveryRank(world, async (c) => {
      const run = await RankRun.open(c, { plan, cfg, data, backend }, simActionUs);
      try {
        const rec = await run.step();
        return run.summary([rec]);
      } finally {
        await run.close();
      }
    });
  } finally {
    closeLocalWorld(world);
  }
  const r0 = ranks[0].records[0];
  const step: StepReport = {
    ...r0,
    ms: Math.max(...ranks.map((s) => s.records[0].ms)),
    sent: ranks.map((s) => s.records[0].sent),
    byDim: ranks.map((s) => s.records[0].byDim),
    routing: combineRouting(ranks.map((s) => s.records[0].routing), cfg),
  };
  const text = `measured: one real step on ${ranks.length} in-process ranks (loss ${r0.loss.toFixed(4)})\n` +
    accountingText(
      plan,
      cfg,
      'not modelled in a measurement (elements are network-independent)',
      accounting(plan, model, cfg, [step], ranks),
    );
  return { text, ranks };
}
