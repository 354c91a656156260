/**
 * What a parallel training run reports (train_parallel.ts): a metrics.jsonl row and, every log
 * interval, a nanoGPT-style line per step; at the end trace.json, accounting.json and plan.txt,
 * with one line saying whether every rank's measured elements per collective equal the prediction.
 */
import type { NetworkModel } from '../comm/network.ts';
import type { ChromeTrace } from '../comm/trace.ts';
import { writeAtomic } from '../io/atomic.ts';
import type { ParallelPlan } from '../parallel/plan/plan.ts';
import { accounting, accountingText, fmtBytes } from '../perf/plan_report.ts';
import type { StepReport } from '../parallel/run/run_host.ts';
import type { SplitRouting } from '../parallel/expert/moe_routing.ts';
import type { TrainConfig } from '../train/config.ts';
import { depthMetric } from '../models/recurrence.ts';

/**
 * The per-step callback of runParallel: writes the step's metrics row (elements and bytes sent
 * per collective, per rank) and prints the log line every logInterval steps, the last and any
 * step with a validation loss (handed to `onVal`).
 */
export function stepReporter(o: {
  write: (row: Record<string, unknown>) => void;
  say: (line: string) => void;
  cfg: TrainConfig;
  size: number;
  onVal: (v: number) => void;
}): (r: StepReport) => void {
  const { write, say, cfg, size } = o;
  return (r) => {
    const byKind: Record<string, number> = {};
    for (const m of r.byDim) for (const [k, n] of Object.entries(m)) byKind[k] = (byKind[k] ?? 0) + n;
    const bytes = Object.values(byKind).reduce((a, n) => a + 4 * n, 0);
    write({
      step: r.step,
      loss: r.loss,
      lr: r.lr,
      grad_norm: r.gradNorm,
      ...depthMetric(cfg, r.step),
      ms_per_step: r.ms,
      sim_ms_per_step: r.simUs / 1000,
      tokens_per_s: r.tokensPerSec,
      elements_by_collective: byKind,
      bytes_by_collective: Object.fromEntries(Object.entries(byKind).map(([k, n]) => [k, 4 * n])),
      sent_by_rank: r.sent,
      ...(r.lossScale === undefined ? {} : { loss_scale: r.lossScale, skipped: r.skipped }),
      ...(r.routing ? { moe_routing: routingRow(r.routing) } : {}),
    });
    if ((r.step + 1) % cfg.logInterval === 0 || r.step + 1 === cfg.steps || r.valLoss !== undefined) {
      say(
        `step ${String(r.step).padStart(5)} | loss ${r.loss.toFixed(4)} | lr ${r.lr.toExponential(2)} | ${
          r.ms.toFixed(1)
        } ms/step | ${Math.round(r.tokensPerSec)} tokens/s | ${fmtBytes(bytes / size)} sent/rank` +
          (r.lossScale === undefined
            ? ''
            : ` | loss scale ${r.lossScale}${r.skipped ? ' (overflow: skipped, scale halved)' : ''}`) +
          (r.routing ? ` | ${routingText(r.routing)}` : ''),
      );
    }
    if (r.valLoss !== undefined) {
      o.onVal(r.valLoss);
      write({ step: r.step, val_loss: r.valLoss });
      say(`step ${String(r.step).padStart(5)} | val loss ${r.valLoss.toFixed(4)}`);
    }
  };
}

/** Writes trace.json, accounting.json and plan.txt into `outDir` and says whether measured = predicted. */
export async function writeAccounting(
  outDir: string,
  r: {
    plan: ParallelPlan;
    cfg: TrainConfig;
    net: NetworkModel | null;
    acc: ReturnType<typeof accounting>;
    trace: ChromeTrace;
    /** False when some collectives ran on MPI's own backend, whose messages no trace sees. */
    traced: boolean;
  },
  say: (line: string) => void,
): Promise<void> {
  const enc = new TextEncoder();
  await writeAtomic(`${outDir}/trace.json`, enc.encode(JSON.stringify(r.trace)));
  await writeAtomic(
    `${outDir}/accounting.json`,
    enc.encode(JSON.stringify({ plan: r.plan, ranks: r.acc }, null, 2) + '\n'),
  );
  const net = r.net?.toString() ?? 'none (messages cost no simulated time; --net prices them)';
  await writeAtomic(`${outDir}/plan.txt`, enc.encode(accountingText(r.plan, r.cfg, net, r.acc) + '\n'));
  const bad = r.acc.flatMap((a) =>
    a.traffic.filter((t) => t.exact && t.measured !== t.predicted).map((t) => `rank ${a.rank} ${t.key}`)
  );
  if (!r.traced) {
    say(
      "accounting: MPI's own collectives (--comm-backend) leave no send spans, so measured elements cover this project's algorithms only (see plan.txt)",
    );
    return;
  }
  say(
    `accounting: ${
      bad.length
        ? `measured ≠ predicted on ${bad.join(', ')}`
        : 'measured elements per collective = predicted on every exact row'
    } (see plan.txt)`,
  );
}

/** The metrics row's `moe_routing`: the step's choices, those its split routed differently, and the drops of each routing. */
function routingRow(r: SplitRouting): Record<string, number> {
  return {
    assignments: r.assignments,
    routed_differently: r.differ,
    dropped_split: r.droppedSplit,
    dropped_one_group: r.droppedWhole,
  };
}

/** The log line's part: how many expert choices the per-rank token groups kept or dropped otherwise than one group would. */
function routingText(r: SplitRouting): string {
  return `moe: ${r.differ}/${r.assignments} choices routed differently than in one group per micro-batch ` +
    `(dropped ${r.droppedSplit} vs ${r.droppedWhole})`;
}
