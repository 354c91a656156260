/**
 * The text of a plan's accounting, shared by `npm run plan` (predictions, and with `--measure`
 * one measured step) and a parallel `npm run train` (plan.txt, accounting.json): predicted α-β
 * time per traffic row, predicted elements beside measured ones, the pipeline dry run as an
 * ASCII chart, predicted activations beside the measured pool peak, and the per-rank accounting
 * of a run. Pure formatting: no file system, no GPU.
 */
import type { TrainConfig } from '../train/config.ts';
import type { NetworkModel } from '../comm/network.ts';
import { p2pTimeUs, predictUs } from '../comm/cost.ts';
import { describePlan, type ParallelPlan, type PlanModel, rankCoords } from '../parallel/plan/plan.ts';
import type { CommRow } from '../parallel/cost/cost.ts';
import { rankMemory } from './memory_cost.ts';
import type { DryRun } from '../parallel/pipeline/pipeline_sim.ts';
import type { ActivationMemory } from './activation_memory.ts';
import type { RankSummary } from '../parallel/run/run.ts';
import type { StepReport } from '../parallel/run/run_host.ts';

/** `n` rounded, with thousands separators. */
export const fmtInt = (n: number) => Math.round(n).toLocaleString('en-US');
/** `b` bytes in B, KiB, MiB or GiB. */
export const fmtBytes = (
  b: number,
) => (b >= 2 ** 30
  ? `${(b / 2 ** 30).toFixed(2)} GiB`
  : b >= 2 ** 20
  ? `${(b / 2 ** 20).toFixed(2)} MiB`
  : b >= 1024
  ? `${(b / 1024).toFixed(1)} KiB`
  : `${b} B`);
/** A fraction as a percentage with one decimal. */
export const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
/** A text table: the first column left-aligned, the others right-aligned, padded to the widest cell. */
export const table = (head: string[], rows: (string | number)[][]) => {
  const cells = [head, ...rows.map((r) => r.map(String))];
  const w = head.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  return cells.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ')).join('\n');
};

/** The slowest link inside a group (inter-node when any member sits on another node). */
export const groupLink = (net: NetworkModel, g: number[]) =>
  net.spec[g.some((r) => net.kind(g[0], r) === 'inter') ? 'inter' : 'intra'];

/** Predicted µs of a row on `net`: α-β per call (collectives) or per message (sends). */
export function rowTimeUs(row: CommRow, net: NetworkModel): number {
  const link = groupLink(net, row.group);
  if (row.collective === 'send') return row.messages * p2pTimeUs(row.n * 4, link);
  return row.calls * predictUs(row.collective, row.algorithm, row.n * 4, row.group.length, link);
}

/**
 * Predicted elements beside what a measured step recorded, per `dim/collective` key (the keys
 * of cost.ts `trafficByKind`; a measured run maps its trace's groups to dimensions). For the
 * helper that runs real parallel steps; `npm run plan` never invents measured numbers.
 */
export function measuredComparison(rows: CommRow[], measured: Record<string, number>): string {
  const pred = new Map<string, number>();
  for (const r of rows) pred.set(`${r.dim}/${r.collective}`, (pred.get(`${r.dim}/${r.collective}`) ?? 0) + r.elements);
  const keys = [...new Set([...pred.keys(), ...Object.keys(measured)])].sort();
  return table(
    ['dim/collective', 'predicted elements', 'measured elements', 'difference'],
    keys.map((k) => {
      const p = pred.get(k) ?? 0, m = measured[k];
      return [k, fmtInt(p), m === undefined ? '–' : fmtInt(m), m === undefined ? '–' : fmtInt(m - p)];
    }),
  );
}

/** The dry run as one text row per rank: a…z forward of micro-batch 0…25, A…Z backward, ~ transfer, . idle. */
export function timelineChart(d: DryRun, width = 64): string {
  const ch = (r: number, t: number) => {
    const s = d.ranks[r].find((x) => x.start <= t && t < x.end);
    if (!s || s.kind === 'idle') return '.';
    if (s.kind === 'comm') return '~';
    const c = String.fromCharCode(97 + (s.action!.micro % 26));
    return s.action!.kind === 'backward' ? c.toUpperCase() : c;
  };
  const rows = d.ranks.map((_, r) =>
    `  stage rank ${String(r).padEnd(3)}|${
      [...Array(width).keys()].map((c) => ch(r, ((c + 0.5) * d.makespan) / width)).join('')
    }|`
  );
  return [...rows, `  ${''.padEnd(14)}0 ms${`${d.makespan.toFixed(2)} ms`.padStart(width - 2)}`].join('\n');
}

/** Predicted activations beside the measured pool peak per rank, with their ratio. */
export function activationComparison(
  acts: { ranks?: ActivationMemory[]; why?: string },
  peak: Map<number, number>,
): string {
  if (!acts.ranks) {
    return `activations: not predicted (${acts.why}); measured pool peaks: ${
      [...peak.values()].map(fmtBytes).join(', ') || '–'
    }`;
  }
  return "activations: predicted peak of the tapes beside the measured buffer-pool peak of the step. The pool also holds the backward's\n" +
    'activation gradients, kernel workspaces (matmul partials, LayerNorm partials) and per-step token buffers, so measured ≥\n' +
    'predicted and their ratio is the overhead beyond the activations themselves.\n' +
    table(
      ['rank', 'predicted activations', 'pool-rounded', 'measured pool peak', 'measured / predicted'],
      acts.ranks.map((a, r) => {
        const m = peak.get(r);
        return [
          r,
          fmtBytes(a.bytes),
          fmtBytes(a.pooledBytes),
          m === undefined ? '–' : fmtBytes(m),
          m === undefined ? '–' : `${(m / a.bytes).toFixed(2)}×`,
        ];
      }),
    );
}

/** Per rank and `dim/collective`: predicted (cost.ts stepTraffic for the trainer that ran), measured (last step), exact, and whether every step sent the same. */
export function accounting(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  steps: StepReport[],
  ranks: RankSummary[],
) {
  const last = steps[steps.length - 1];
  return ranks.map((s) => {
    const { params, grads, optimizer, paramElements } = rankMemory(plan, model, s.rank, cfg.bias);
    const pred = new Map<string, { n: number; exact: boolean }>();
    for (const r of s.predicted) {
      const k = `${r.dim}/${r.collective}`, o = pred.get(k) ?? { n: 0, exact: true };
      pred.set(k, { n: o.n + r.elements, exact: o.exact && r.exact });
    }
    const measured = last?.byDim[s.rank] ?? {};
    const keys = [...new Set([...pred.keys(), ...Object.keys(measured)])].sort();
    return {
      rank: s.rank,
      coords: rankCoords(plan, s.rank),
      kind: s.kind,
      memory: { measured: s.memory, predicted: { params, grads, optimizer, paramElements } },
      traffic: keys.map((key) => ({
        key,
        predicted: pred.get(key)?.n ?? 0,
        measured: measured[key] ?? 0,
        exact: pred.get(key)?.exact ?? true,
        steady: steps.every((st) => (st.byDim[s.rank][key] ?? 0) === (measured[key] ?? 0)),
      })),
    };
  });
}

/** plan.txt: the accounting as text tables. */
export function accountingText(
  plan: ParallelPlan,
  cfg: TrainConfig,
  net: string,
  acc: ReturnType<typeof accounting>,
): string {
  const out = [
    `plan     ${describePlan(plan)}`,
    `trainer  ${
      acc[0]?.kind
    } · ${cfg.arch} · ${cfg.nLayer} layers · width ${cfg.nEmbd} · context ${cfg.blockSize} · global batch ${
      cfg.batchSize * cfg.gradAccum
    }`,
    `network  ${net}`,
    '',
  ];
  out.push(
    "memory per rank (fp32): measured = this rank's ParamStore flat buffers (alignment padding included) or its ZeRO shards and working buffers (resident units + one layer), peak pool = activations and temporaries; predicted = cost.ts rankMemory",
  );
  out.push(
    table(
      [
        'rank',
        'dp',
        'pp',
        'cp',
        'tp',
        'param elements',
        'predicted',
        'params',
        'predicted',
        'grads',
        'predicted',
        'optimizer',
        'predicted',
        'peak pool',
      ],
      acc.map((a) => {
        const m = a.memory.measured, p = a.memory.predicted;
        return [
          a.rank,
          a.coords.dp,
          a.coords.pp,
          a.coords.cp,
          a.coords.tp,
          fmtInt(m.paramElements),
          fmtInt(p.paramElements),
          fmtBytes(m.params),
          fmtBytes(p.params),
          fmtBytes(m.grads),
          fmtBytes(p.grads),
          fmtBytes(m.optimizer),
          fmtBytes(p.optimizer),
          fmtBytes(m.peakPool),
        ];
      }),
    ),
    '',
  );
  const dims = ['dp', 'tp', 'pp', 'cp', 'ep'];
  out.push('elements sent per step by parallel dimension, measured (last step) / predicted');
  out.push(
    table(
      ['rank', ...dims],
      acc.map((a) => [
        a.rank,
        ...dims.map((dim) => {
          const sum = (f: (t: (typeof a.traffic)[number]) => number) =>
            a.traffic.filter((t) => t.key.startsWith(`${dim}/`)).reduce((x, t) => x + f(t), 0);
          return `${fmtInt(sum((t) => t.measured))} / ${fmtInt(sum((t) => t.predicted))}`;
        }),
      ]),
    ),
    '',
  );
  for (const a of acc) {
    const bad = a.traffic.filter((t) => t.exact && t.measured !== t.predicted),
      approx = a.traffic.filter((t) => !t.exact).map((t) => t.key);
    out.push(
      `rank ${a.rank}: elements per step by dim/collective — ${
        bad.length ? `MISMATCH on ${bad.map((t) => t.key).join(', ')}` : 'measured = predicted on every exact row'
      }` +
        `${approx.length ? ` (≈ approximate in cost.ts: ${approx.join(', ')})` : ''}${
          a.traffic.every((t) => t.steady) ? '' : ' (varies between steps)'
        }`,
    );
    out.push(
      table(
        ['dim/collective', 'predicted elements', 'measured elements', 'difference', 'exact'],
        a.traffic.map((
          t,
        ) => [t.key, fmtInt(t.predicted), fmtInt(t.measured), fmtInt(t.measured - t.predicted), t.exact ? 'yes' : '≈']),
      ),
      '',
    );
  }
  return out.join('\n');
}
