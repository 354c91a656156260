/**
 * `npm run plan -- [train flags] --dp 2 --tp 2 --pp 2 [--net nvlink-ib] …`: the analytical side
 * of a parallel run (docs/design.md §21) without opening a GPU — the validated
 * plan (or one `error:` line naming every broken rule), memory per rank, the messages every
 * rank sends per optimizer step by parallel dimension and collective (elements, bytes, α-β
 * time on the modelled network), the pipeline bubble and the predicted timeline of the
 * pipeline schedule as an ASCII chart.
 *
 * Flags are the training CLI's (src/cli/args.ts), the parallel plan's (PlanSchema, as a parallel
 * `npm run train` reads them) and this command's own (PlanCliSchema, src/cli/command.ts);
 * `batchSize × gradAccum` is the global batch the plan splits over dp × micro-batches (default
 * gradAccum, as in training). The pipeline schedule is `--pp-schedule`;
 * `--schedule gpipe|1f1b|interleaved` is accepted as an alias because the training config's
 * `--schedule` already names the learning-rate schedule (whose values never overlap).
 * Memory per rank also shows the analytical peak activation bytes of the tapes
 * (src/parallel/activation_memory.ts, GPT only); with `--measure` they are printed beside the
 * measured pool peak, which also holds activation gradients and kernel workspaces, so both
 * figures and their ratio are shown rather than a pretended equality.
 * The tables and the measured step's accounting are src/parallel/plan_report.ts's and
 * src/parallel/measure.ts's; without `--measure` this command prints predictions only.
 */
import { trainHelp } from './args.ts';
import { checkCommand, type PlanCliOptions, PlanCliSchema } from './command.ts';
import { flagKeys, helpLines } from './flags.ts';
import type { TrainConfig } from '../train/config.ts';
import type { Backend } from '../gpu/device.ts';
import { NetworkModel } from '../comm/network.ts';
import { MAX_PLAN_WORLD, MAX_RUN_WORLD, PlanSchema } from '../parallel/plan_schema.ts';
import { planModelOf } from '../parallel/run.ts';
import {
  describePlan,
  makePlan,
  paddedVocab,
  type ParallelPlan,
  planGroup,
  type PlanModel,
  planWorldSize,
  rankCoords,
  type StrategyKind,
  strategyOf,
  validatePlan,
  zeroWorkingElements,
} from '../parallel/plan.ts';
import { bubbleFraction, type PlanDim, rankMemory, stepTraffic, type TrafficOptions } from '../parallel/cost.ts';
import { p2pTimeUs } from '../comm/cost.ts';
import { makeSchedule, peakInFlight } from '../parallel/pipeline_schedule.ts';
import { dryRun } from '../parallel/pipeline_sim.ts';
import { type ActivationMemory, activationMemory, korthikantiLayerBytes } from '../parallel/activation_memory.ts';
import {
  activationComparison,
  fmtBytes,
  fmtInt,
  groupLink,
  pct,
  rowTimeUs,
  table,
  timelineChart,
} from '../parallel/plan_report.ts';
import { loadTrainingData } from '../io/corpus.ts';
import { runCli } from './main.ts';

const HELP = `npm run plan -- [flags]      predict memory, communication and the pipeline timeline of a parallel plan
  world size dp·pp·cp·tp ≤ ${MAX_PLAN_WORLD} (≤ ${MAX_RUN_WORLD} with --measure); ep divides dp; a MoE model is --arch gpt-moe | mamba-moe
  with --n-expert --moe-top-k --capacity-factor (training flags below)

parallel plan (the flags of a parallel \`npm run train\`):
${helpLines(flagKeys(PlanSchema)).join('\n')}

this command:
${helpLines(flagKeys(PlanCliSchema)).join('\n')}

training flags (model shape, batch):
`;

/** Vocabulary: the flag, else GPT-2's 50257, else the distinct characters of the data file. */
async function vocabSize(cfg: TrainConfig, flag: number | undefined): Promise<number> {
  if (flag !== undefined) return flag;
  if (cfg.tokenizer === 'gpt2') return 50257;
  try {
    return new Set(await Deno.readTextFile(cfg.data)).size;
  } catch (e) {
    throw new Error(
      `cannot read --data '${cfg.data}' to count its characters (${(e as Error).message}); pass --vocab-size`,
    );
  }
}

/**
 * Builds the plan and model from argv: {@link checkCommand}'s flags, config and plan (as a
 * parallel `npm run train` builds them), then the model (planModelOf, as the run's) checked
 * against the plan. `flags` are PlanCliSchema's values and the --net text.
 * @throws Error naming the bad flag, config key or --config file, or every broken plan rule.
 */
export async function planFromArgs(
  argv: string[],
): Promise<
  {
    plan: ParallelPlan;
    model: PlanModel;
    cfg: TrainConfig;
    flags: PlanCliOptions & { net?: string; gpu: Backend };
    help: boolean;
  }
> {
  const { args, cfg, plan } = await checkCommand(argv, 'plan');
  const flags = {
    ...PlanCliSchema.parse(args.options),
    net: args.options.net as string | undefined,
    gpu: args.gpu as Backend,
  };
  if (args.help || !cfg || !plan) {
    return { plan: makePlan(), model: {} as PlanModel, cfg: {} as TrainConfig, flags, help: true };
  }
  const model = planModelOf(plan, cfg, await vocabSize(cfg, flags.vocabSize));
  validatePlan(plan, model);
  return { plan, model, cfg, flags, help: false };
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
  const { plan, model, cfg, flags: f, help } = await planFromArgs(argv);
  if (help) {
    console.log(HELP + trainHelp());
    return HELP;
  }
  const net = NetworkModel.parse(f.net ?? 'nvlink-ib');
  const opts: TrafficOptions = {
    algorithm: f.algorithm,
    topK: cfg.moeTopK,
    capacityFactor: cfg.capacityFactor,
    bias: cfg.bias,
    trainer: trainerOrNone(plan, cfg.arch),
  };
  const world = planWorldSize(plan), me = f.rank;
  if (me >= world) throw new Error(`--rank ${me} is outside the plan's ${world} ranks`);
  const b = model.batchSize / (plan.dp * plan.microBatches), d = plan.dp * plan.cp;
  const out = [
    `plan     ${describePlan(plan)}`,
    `model    ${cfg.arch} · ${model.nLayer} layers · ${model.nHead} heads · width ${model.nEmbd} · context ${model.blockSize} · vocab ${model.vocabSize}` +
    `${plan.tp > 1 ? ` (padded to ${paddedVocab(model.vocabSize, plan.tp)})` : ''}${
      model.nExpert ? ` · ${model.nExpert} experts` : ''
    }` +
    ` · global batch ${model.batchSize} = dp ${plan.dp} × ${plan.microBatches} micro-batches × ${b} sequences`,
    `network  ${net}`,
    '',
    `memory per rank: fp32 AdamW (4 B parameter + 4 B gradient + 8 B optimizer state per element), ZeRO-${plan.zero} over dp·cp = ${d}` +
    (plan.zero >= 2
      ? `; working buffers of ${
        fmtInt(zeroWorkingElements(model, cfg.bias))
      } elements (embeddings, ln_f and one layer) for gathered ${plan.zero === 3 ? 'values and ' : ''}gradients`
      : ''),
  ];
  const ranks = [...Array(world).keys()];
  const acts = activations(plan, model, cfg, opts.trainer);
  const memRows = ranks.map((r) => {
    const c = rankCoords(plan, r), m = rankMemory(plan, model, r, cfg.bias), a = acts.ranks?.[r];
    return [
      r,
      c.dp,
      c.pp,
      c.cp,
      c.tp,
      fmtInt(m.paramElements),
      fmtBytes(m.params),
      fmtBytes(m.grads),
      fmtBytes(m.optimizer),
      fmtBytes(m.total),
      a ? fmtBytes(a.bytes) : '–',
      a ? a.inFlight : '–',
      a ? fmtBytes(m.total + a.bytes) : '–',
    ];
  });
  out.push(
    table([
      'rank',
      'dp',
      'pp',
      'cp',
      'tp',
      'elements',
      'params',
      'grads',
      'optimizer',
      'total',
      'activations',
      'in flight',
      'total + act.',
    ], memRows),
  );
  out.push(activationNote(acts, plan, model, me), '');
  const dims: PlanDim[] = ['dp', 'tp', 'pp', 'cp', 'ep'];
  const traffic = ranks.map((r) => stepTraffic(plan, model, r, opts));
  out.push('communication per optimizer step: elements each rank sends, by parallel dimension (4 B each)');
  out.push(
    table(
      ['rank', ...dims, 'total', 'bytes', 'predicted µs'],
      ranks.map((r) => {
        const by = (dim: PlanDim) => traffic[r].filter((x) => x.dim === dim).reduce((a, x) => a + x.elements, 0);
        const total = dims.reduce((a, x) => a + by(x), 0);
        return [
          r,
          ...dims.map((x) => fmtInt(by(x))),
          fmtInt(total),
          fmtBytes(4 * total),
          fmtInt(traffic[r].reduce((a, x) => a + rowTimeUs(x, net), 0)),
        ];
      }),
    ),
    '',
  );
  out.push(
    `rank ${me} in detail (${opts.algorithm} collectives; ≈ marks counts that depend on implementation choices):`,
  );
  out.push(
    traffic[me].length
      ? table(
        [
          'dim',
          'what',
          'collective',
          'algorithm',
          'group',
          'calls',
          'elements/call',
          'elements sent',
          'bytes sent',
          'predicted µs',
        ],
        traffic[me].map((
          x,
        ) => [
          x.dim,
          x.what,
          x.collective,
          x.algorithm,
          `[${x.group.join(',')}]`,
          x.calls,
          fmtInt(x.n),
          `${x.exact ? '' : '≈'}${fmtInt(x.elements)}`,
          fmtBytes(4 * x.elements),
          rowTimeUs(x, net).toFixed(1),
        ]),
      )
      : '  (single rank: no messages)',
    '',
  );
  const sched = makeSchedule(plan.schedule, plan.pp, plan.microBatches, plan.virtualStages);
  const act =
    (plan.sp
      ? b * (model.blockSize / plan.cp) * model.nEmbd / plan.tp
      : b * (model.blockSize / plan.cp) * model.nEmbd) * 4;
  const ppGroup = planGroup(plan, 'pp', me);
  const costs = {
    forwardMs: f.forwardMs,
    backwardMs: f.backwardMs,
    p2pMs: plan.pp > 1 ? p2pTimeUs(act, groupLink(net, ppGroup)) / 1e3 : 0,
  };
  const dry = dryRun(sched, costs);
  out.push(
    `pipeline ${plan.schedule}: p ${plan.pp}, m ${plan.microBatches}${
      plan.virtualStages > 1 ? `, v ${plan.virtualStages}` : ''
    } · bubble formula (p−1)/(v·m+p−1) = ` +
      `${pct(bubbleFraction(plan.pp, plan.microBatches, plan.virtualStages))} · dry run ${pct(dry.bubble)} idle, ${
        pct(dry.comm)
      } transfers, step ${dry.makespan.toFixed(3)} ms`,
  );
  out.push(
    `  costs: forward ${costs.forwardMs} ms, backward ${costs.backwardMs} ms per stage and micro-batch (assumed), message ${
      costs.p2pMs.toFixed(4)
    } ms (${fmtBytes(act)} on the modelled link)`,
  );
  out.push(
    `  peak in-flight activations per pipeline rank: ${peakInFlight(sched).join(', ')}${
      plan.virtualStages > 1 ? ' (model chunks)' : ' (micro-batches)'
    }`,
  );
  out.push(
    timelineChart(dry, f.width),
    '  legend: a…z forward of micro-batch 0…25, A…Z its backward, ~ transfer, . idle',
  );
  const text = out.join('\n');
  console.log(text);
  if (!f.measure) return text;
  const { tokenizer, texts } = await loadTrainingData(cfg);
  if (texts.length !== 1) {
    throw new Error(`--measure trains on one data file; got a mixture of ${texts.length} (${cfg.data})`);
  }
  const data = { tokens: tokenizer.encode(texts[0]), vocabSize: tokenizer.vocabSize };
  const measured = await (await import('../parallel/measure.ts')).measure(plan, cfg, data, f.gpu); // --gpu picks the ranks' WebGPU, as for train
  const peaks = new Map(measured.ranks.map((r) => [r.rank, r.memory.peakPool]));
  const both = `${measured.text}\n\n${activationComparison(acts, peaks)}`;
  console.log(`\n${both}`);
  return `${text}\n\n${both}`;
}

/** Every rank's analytical activation memory, or why there is none (a non-GPT architecture). */
function activations(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  trainer?: StrategyKind,
): { ranks?: ActivationMemory[]; why?: string } {
  try {
    const o = { arch: cfg.arch, bias: cfg.bias, attention: cfg.attention, trainer };
    return { ranks: [...Array(planWorldSize(plan)).keys()].map((r) => activationMemory(plan, model, r, o)) };
  } catch (e) {
    return { why: (e as Error).message };
  }
}

/** How the activation column was computed, with rank `me`'s layer beside Korthikanti et al.'s fp16 count. */
function activationNote(
  acts: ReturnType<typeof activations>,
  plan: ParallelPlan,
  model: PlanModel,
  me: number,
): string {
  if (!acts.ranks) return `  activations: not predicted — ${acts.why}`;
  const a = acts.ranks[me], b = model.batchSize / (plan.dp * plan.microBatches), s = model.blockSize / plan.cp;
  const k = korthikantiLayerBytes(s, b, model.nEmbd, model.nHead, plan.tp, plan.sp);
  return `  activations: analytical peak of the tensors the autograd tapes keep (fp32; GPT; src/parallel/activation_memory.ts): the peak over the schedule, ≈ one micro-batch × the most in flight;\n` +
    `  rank ${me} (${a.kind} trainer): ${fmtBytes(a.perMicroBatch)} per micro-batch, ${
      fmtBytes(a.perLayer)
    } per layer — ` +
    `Korthikanti et al. (arXiv 2205.05198) fp16 ${
      plan.tp > 1 ? (plan.sp ? 'sbh/t·(34 + 5as/h)' : 'sbh(10 + 24/t + 5as/(ht))') : 'sbh(34 + 5as/h)'
    } = ${fmtBytes(k)} per layer`;
}

if (import.meta.main) await runCli(main);
