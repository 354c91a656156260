/**
 * `npm run plan -- [train flags] --dp 2 --tp 2 --pp 2 [--net nvlink-ib] …`: the analytical side
 * of a parallel run (DESIGN.md §6–§7, issue 5 item 8) without opening a GPU — the validated
 * plan (or one `error:` line naming every broken rule), memory per rank, the messages every
 * rank sends per optimizer step by parallel dimension and collective (elements, bytes, α-β
 * time on the modelled network), the pipeline bubble and the predicted timeline of the
 * pipeline schedule as an ASCII chart.
 *
 * Model flags are the training CLI's (src/cli/args.ts); `batchSize × gradAccum` is the global
 * batch the plan splits over dp × micro-batches. The pipeline schedule is `--pp-schedule`;
 * `--schedule gpipe|1f1b|interleaved` is accepted as an alias because the training config's
 * `--schedule` already names the learning-rate schedule (whose values never overlap).
 * Memory per rank also shows the analytical peak activation bytes of the tapes
 * (src/parallel/activation_memory.ts, GPT only); with `--measure` they are printed beside the
 * measured pool peak, which also holds activation gradients and kernel workspaces, so both
 * figures and their ratio are shown rather than a pretended equality.
 * Measured counts from a real step are compared by {@link measuredComparison}; without
 * `--measure` this command prints predictions only.
 */
import { parseTrainArgs, trainHelp } from './args.ts';
import { parseConfig, PRESETS, type TrainConfig } from '../train/config.ts';
import { NET_PRESETS, NetworkModel } from '../dist/network.ts';
import { type CpKind, describePlan, makePlan, paddedVocab, type ParallelPlan, planGroup, type PlanModel, planWorldSize, rankCoords, strategyOf, type StrategyKind, validatePlan, zeroWorkingElements } from '../parallel/plan.ts';
import { bubbleFraction, type CommRow, type PlanDim, rankMemory, stepTraffic, type TrafficOptions } from '../parallel/cost.ts';
import { p2pTimeUs, predictUs } from '../dist/cost.ts';
import { makeSchedule, peakInFlight, SCHEDULE_KINDS, type ScheduleKind } from '../parallel/pipeline_schedule.ts';
import { dryRun, type DryRun } from '../parallel/pipeline_sim.ts';
import { type ActivationMemory, activationMemory, korthikantiLayerBytes } from '../parallel/activation_memory.ts';
import { runCli } from './main.ts';

const FLAGS = {
  dp: { type: 'string' }, tp: { type: 'string' }, pp: { type: 'string' }, cp: { type: 'string' }, ep: { type: 'string' },
  zero: { type: 'string' }, sp: { type: 'boolean' }, 'pp-schedule': { type: 'string' }, 'micro-batches': { type: 'string' },
  'virtual-stages': { type: 'string' }, 'cp-kind': { type: 'string' }, 'n-expert': { type: 'string' }, 'moe-top-k': { type: 'string' },
  'capacity-factor': { type: 'string' }, 'vocab-size': { type: 'string' }, net: { type: 'string' }, algorithm: { type: 'string' },
  rank: { type: 'string' }, 'forward-ms': { type: 'string' }, 'backward-ms': { type: 'string' }, width: { type: 'string' },
} as const;

const HELP = `npm run plan -- [flags]      predict memory, communication and the pipeline timeline of a parallel plan
  --dp --tp --pp --cp --ep N   degrees (default 1); world size = dp·pp·cp·tp, ep divides dp
  --zero 0|1|2|3               ZeRO stage over the DP group (default 0)
  --sp                         Megatron sequence parallelism (needs tp > 1)
  --pp-schedule S              ${SCHEDULE_KINDS.join(' | ')} (default 1f1b; --schedule S also works)
  --micro-batches M            micro-batches per step (default 1)   --virtual-stages V   interleaved chunks (default 1)
  --cp-kind ring|ulysses       context-parallel attention (default ring)
  --n-expert E --moe-top-k K --capacity-factor F   a MoE model (defaults: none, 1, 1.25)
  --vocab-size V               default: distinct characters of --data (char) or 50257 (gpt2)
  --net SPEC                   ${Object.keys(NET_PRESETS).join(' | ')} or 'intra=…GB/s,…us;inter=…;node=…' (default nvlink-ib)
  --algorithm A                ring | recursive-doubling | rabenseifner | direct (default ring)
  --rank R                     rank whose collectives are listed in detail (default 0)
  --forward-ms --backward-ms   stage cost per micro-batch for the timeline (default 1, 2)
  --width W                    timeline columns (default 64)
  --measure                    also run one real step on in-process ranks and print measured beside predicted

training flags (model shape, batch):
`;

const int = (flags: Record<string, unknown>, k: string, def: number, min = 1): number => {
  const v = flags[k];
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${k} expects an integer ≥ ${min}, got '${v}'`);
  return n;
};
const num = (flags: Record<string, unknown>, k: string, def: number): number => {
  const v = flags[k], n = v === undefined ? def : Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${k} expects a number ≥ 0, got '${v}'`);
  return n;
};
const oneOf = <T extends string>(v: unknown, allowed: readonly T[], def: T, flag: string): T => {
  if (v === undefined) return def;
  if (!allowed.includes(v as T)) throw new Error(`--${flag} must be one of ${allowed.join(', ')}, got '${v}'`);
  return v as T;
};

/** Vocabulary: the flag, else GPT-2's 50257, else the distinct characters of the data file. */
async function vocabSize(cfg: TrainConfig, flag: unknown): Promise<number> {
  if (flag !== undefined) return int({ v: flag }, 'v', 0);
  if (cfg.tokenizer === 'gpt2') return 50257;
  try {
    return new Set(await Deno.readTextFile(cfg.data)).size;
  } catch (e) {
    throw new Error(`cannot read '${cfg.data}' to count its characters (${(e as Error).message}); pass --vocab-size`);
  }
}

const fmtInt = (n: number) => Math.round(n).toLocaleString('en-US');
const fmtBytes = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(2)} MiB` : b >= 1024 ? `${(b / 1024).toFixed(1)} KiB` : `${b} B`);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const table = (head: string[], rows: (string | number)[][]) => {
  const cells = [head, ...rows.map((r) => r.map(String))];
  const w = head.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  return cells.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ')).join('\n');
};

/** The slowest link inside a group (inter-node when any member sits on another node). */
const groupLink = (net: NetworkModel, g: number[]) => net.spec[g.some((r) => net.kind(g[0], r) === 'inter') ? 'inter' : 'intra'];

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
  return table(['dim/collective', 'predicted elements', 'measured elements', 'difference'], keys.map((k) => {
    const p = pred.get(k) ?? 0, m = measured[k];
    return [k, fmtInt(p), m === undefined ? '–' : fmtInt(m), m === undefined ? '–' : fmtInt(m - p)];
  }));
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
  const rows = d.ranks.map((_, r) => `  stage rank ${String(r).padEnd(3)}|${[...Array(width).keys()].map((c) => ch(r, ((c + 0.5) * d.makespan) / width)).join('')}|`);
  return [...rows, `  ${''.padEnd(14)}0 ms${`${d.makespan.toFixed(2)} ms`.padStart(width - 2)}`].join('\n');
}

/** Builds the plan and model from argv. @throws Error naming the bad flag or every broken plan rule. */
export async function planFromArgs(argv: string[]): Promise<{ plan: ParallelPlan; model: PlanModel; cfg: TrainConfig; flags: Record<string, unknown>; help: boolean }> {
  argv = argv.map((a, i) =>
    a === '--schedule' && SCHEDULE_KINDS.includes(argv[i + 1] as ScheduleKind) ? '--pp-schedule'
    : SCHEDULE_KINDS.some((k) => a === `--schedule=${k}`) ? a.replace('--schedule', '--pp-schedule') : a);
  const args = parseTrainArgs(argv, FLAGS);
  const f = args.extra;
  if (args.help) return { plan: makePlan(), model: {} as PlanModel, cfg: {} as TrainConfig, flags: f, help: true };
  let fileCfg: Record<string, unknown> = {};
  if (args.configFile) fileCfg = JSON.parse(await Deno.readTextFile(args.configFile));
  const cfg = parseConfig({ ...PRESETS[args.preset], ...fileCfg, ...args.overrides });
  const plan = makePlan({
    dp: int(f, 'dp', 1), tp: int(f, 'tp', 1), pp: int(f, 'pp', 1), cp: int(f, 'cp', 1), ep: int(f, 'ep', 1),
    zero: int(f, 'zero', 0, 0) as ParallelPlan['zero'], sp: f.sp === true,
    schedule: oneOf(f['pp-schedule'], SCHEDULE_KINDS, '1f1b', 'pp-schedule'), microBatches: int(f, 'micro-batches', 1),
    virtualStages: int(f, 'virtual-stages', 1), cpKind: oneOf<CpKind>(f['cp-kind'], ['ring', 'ulysses'], 'ring', 'cp-kind'),
  });
  const nExpert = f['n-expert'] === undefined ? undefined : int(f, 'n-expert', 1);
  const model: PlanModel = {
    nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: cfg.nEmbd, blockSize: cfg.blockSize,
    batchSize: cfg.batchSize * cfg.gradAccum, vocabSize: await vocabSize(cfg, f['vocab-size']), ...(nExpert ? { nExpert } : {}),
  };
  validatePlan(plan, model);
  return { plan, model, cfg, flags: f, help: false };
}

/** The trainer `npm run train:parallel` would run (its scalar collectives join the rows), or none for a plan it refuses. */
function trainerOrNone(plan: ParallelPlan, arch: string): StrategyKind | undefined {
  try {
    return strategyOf(plan, arch);
  } catch {
    return undefined;
  }
}

/** Runs the CLI; returns the text it printed. */
export async function main(argv: string[]): Promise<string> {
  // --measure: also one real step in a local world, measured beside predicted (train_parallel.ts).
  const measure = argv.includes('--measure');
  const { plan, model, cfg, flags: f, help } = await planFromArgs(argv.filter((a) => a !== '--measure'));
  if (help) {
    console.log(HELP + trainHelp());
    return HELP;
  }
  const net = NetworkModel.parse((f.net as string | undefined) ?? 'nvlink-ib');
  const opts: TrafficOptions = {
    algorithm: oneOf(f.algorithm, ['ring', 'recursive-doubling', 'rabenseifner', 'direct'] as const, 'ring', 'algorithm'),
    topK: int(f, 'moe-top-k', 1), capacityFactor: num(f, 'capacity-factor', 1.25), bias: cfg.bias,
    trainer: trainerOrNone(plan, cfg.arch),
  };
  const world = planWorldSize(plan), me = int(f, 'rank', 0, 0);
  if (me >= world) throw new Error(`--rank ${me} is outside the plan's ${world} ranks`);
  const b = model.batchSize / (plan.dp * plan.microBatches), d = plan.dp * plan.cp;
  const out = [
    `plan     ${describePlan(plan)}`,
    `model    ${cfg.arch} · ${model.nLayer} layers · ${model.nHead} heads · width ${model.nEmbd} · context ${model.blockSize} · vocab ${model.vocabSize}` +
      `${plan.tp > 1 ? ` (padded to ${paddedVocab(model.vocabSize, plan.tp)})` : ''}${model.nExpert ? ` · ${model.nExpert} experts` : ''}` +
      ` · global batch ${model.batchSize} = dp ${plan.dp} × ${plan.microBatches} micro-batches × ${b} sequences`,
    `network  ${net}`,
    '',
    `memory per rank: fp32 AdamW (4 B parameter + 4 B gradient + 8 B optimizer state per element), ZeRO-${plan.zero} over dp·cp = ${d}` +
    (plan.zero >= 2 ? `; working buffers of ${fmtInt(zeroWorkingElements(model, cfg.bias))} elements (embeddings, ln_f and one layer) for gathered ${plan.zero === 3 ? 'values and ' : ''}gradients` : ''),
  ];
  const ranks = [...Array(world).keys()];
  const acts = activations(plan, model, cfg, opts.trainer);
  const memRows = ranks.map((r) => {
    const c = rankCoords(plan, r), m = rankMemory(plan, model, r, cfg.bias), a = acts.ranks?.[r];
    return [r, c.dp, c.pp, c.cp, c.tp, fmtInt(m.paramElements), fmtBytes(m.params), fmtBytes(m.grads), fmtBytes(m.optimizer), fmtBytes(m.total),
      a ? fmtBytes(a.bytes) : '–', a ? a.inFlight : '–', a ? fmtBytes(m.total + a.bytes) : '–'];
  });
  out.push(table(['rank', 'dp', 'pp', 'cp', 'tp', 'elements', 'params', 'grads', 'optimizer', 'total', 'activations', 'in flight', 'total + act.'], memRows));
  out.push(activationNote(acts, plan, model, me), '');
  const dims: PlanDim[] = ['dp', 'tp', 'pp', 'cp', 'ep'];
  const traffic = ranks.map((r) => stepTraffic(plan, model, r, opts));
  out.push('communication per optimizer step: elements each rank sends, by parallel dimension (4 B each)');
  out.push(table(['rank', ...dims, 'total', 'bytes', 'predicted µs'], ranks.map((r) => {
    const by = (dim: PlanDim) => traffic[r].filter((x) => x.dim === dim).reduce((a, x) => a + x.elements, 0);
    const total = dims.reduce((a, x) => a + by(x), 0);
    return [r, ...dims.map((x) => fmtInt(by(x))), fmtInt(total), fmtBytes(4 * total), fmtInt(traffic[r].reduce((a, x) => a + rowTimeUs(x, net), 0))];
  })), '');
  out.push(`rank ${me} in detail (${opts.algorithm} collectives; ≈ marks counts that depend on implementation choices):`);
  out.push(traffic[me].length ? table(['dim', 'what', 'collective', 'algorithm', 'group', 'calls', 'elements/call', 'elements sent', 'bytes sent', 'predicted µs'],
    traffic[me].map((x) => [x.dim, x.what, x.collective, x.algorithm, `[${x.group.join(',')}]`, x.calls, fmtInt(x.n), `${x.exact ? '' : '≈'}${fmtInt(x.elements)}`, fmtBytes(4 * x.elements), rowTimeUs(x, net).toFixed(1)]))
    : '  (single rank: no messages)', '');
  const sched = makeSchedule(plan.schedule, plan.pp, plan.microBatches, plan.virtualStages);
  const act = (plan.sp ? b * (model.blockSize / plan.cp) * model.nEmbd / plan.tp : b * (model.blockSize / plan.cp) * model.nEmbd) * 4;
  const ppGroup = planGroup(plan, 'pp', me);
  const costs = { forwardMs: num(f, 'forward-ms', 1), backwardMs: num(f, 'backward-ms', 2), p2pMs: plan.pp > 1 ? p2pTimeUs(act, groupLink(net, ppGroup)) / 1e3 : 0 };
  const dry = dryRun(sched, costs);
  out.push(`pipeline ${plan.schedule}: p ${plan.pp}, m ${plan.microBatches}${plan.virtualStages > 1 ? `, v ${plan.virtualStages}` : ''} · bubble formula (p−1)/(v·m+p−1) = ` +
    `${pct(bubbleFraction(plan.pp, plan.microBatches, plan.virtualStages))} · dry run ${pct(dry.bubble)} idle, ${pct(dry.comm)} transfers, step ${dry.makespan.toFixed(3)} ms`);
  out.push(`  costs: forward ${costs.forwardMs} ms, backward ${costs.backwardMs} ms per stage and micro-batch (assumed), message ${costs.p2pMs.toFixed(4)} ms (${fmtBytes(act)} on the modelled link)`);
  out.push(`  peak in-flight activations per pipeline rank: ${peakInFlight(sched).join(', ')}${plan.virtualStages > 1 ? ' (model chunks)' : ' (micro-batches)'}`);
  out.push(timelineChart(dry, int(f, 'width', 64)), '  legend: a…z forward of micro-batch 0…25, A…Z its backward, ~ transfer, . idle');
  const text = out.join('\n');
  console.log(text);
  if (!measure) return text;
  const measured = await (await import('./train_parallel.ts')).measure(plan, cfg, 'auto');
  const peaks = new Map(measured.ranks.map((r) => [r.rank, r.memory.peakPool]));
  const both = `${measured.text}\n\n${activationComparison(acts, peaks)}`;
  console.log(`\n${both}`);
  return `${text}\n\n${both}`;
}

/** Every rank's analytical activation memory, or why there is none (a non-GPT architecture). */
function activations(plan: ParallelPlan, model: PlanModel, cfg: TrainConfig, trainer?: StrategyKind): { ranks?: ActivationMemory[]; why?: string } {
  try {
    const o = { arch: cfg.arch, bias: cfg.bias, attention: cfg.attention, trainer };
    return { ranks: [...Array(planWorldSize(plan)).keys()].map((r) => activationMemory(plan, model, r, o)) };
  } catch (e) {
    return { why: (e as Error).message };
  }
}

/** How the activation column was computed, with rank `me`'s layer beside Korthikanti et al.'s fp16 count. */
function activationNote(acts: ReturnType<typeof activations>, plan: ParallelPlan, model: PlanModel, me: number): string {
  if (!acts.ranks) return `  activations: not predicted — ${acts.why}`;
  const a = acts.ranks[me], b = model.batchSize / (plan.dp * plan.microBatches), s = model.blockSize / plan.cp;
  const k = korthikantiLayerBytes(s, b, model.nEmbd, model.nHead, plan.tp, plan.sp);
  return `  activations: analytical peak of the tensors the autograd tapes keep (fp32; GPT; src/parallel/activation_memory.ts): the peak over the schedule, ≈ one micro-batch × the most in flight;\n` +
    `  rank ${me} (${a.kind} trainer): ${fmtBytes(a.perMicroBatch)} per micro-batch, ${fmtBytes(a.perLayer)} per layer — ` +
    `Korthikanti et al. (arXiv 2205.05198) fp16 ${plan.tp > 1 ? (plan.sp ? 'sbh/t·(34 + 5as/h)' : 'sbh(10 + 24/t + 5as/(ht))') : 'sbh(34 + 5as/h)'} = ${fmtBytes(k)} per layer`;
}

/** Predicted activations beside the measured pool peak per rank, with their ratio. */
export function activationComparison(acts: { ranks?: ActivationMemory[]; why?: string }, peak: Map<number, number>): string {
  if (!acts.ranks) return `activations: not predicted (${acts.why}); measured pool peaks: ${[...peak.values()].map(fmtBytes).join(', ') || '–'}`;
  return 'activations: predicted peak of the tapes beside the measured buffer-pool peak of the step. The pool also holds the backward\'s\n' +
    'activation gradients, kernel workspaces (matmul partials, LayerNorm partials) and per-step token buffers, so measured ≥\n' +
    'predicted and their ratio is the overhead beyond the activations themselves.\n' +
    table(['rank', 'predicted activations', 'pool-rounded', 'measured pool peak', 'measured / predicted'], acts.ranks.map((a, r) => {
      const m = peak.get(r);
      return [r, fmtBytes(a.bytes), fmtBytes(a.pooledBytes), m === undefined ? '–' : fmtBytes(m), m === undefined ? '–' : `${(m / a.bytes).toFixed(2)}×`];
    }));
}

if (import.meta.main) await runCli(main);
