/**
 * `npm run plan -- [train flags] --dp 2 --tp 2 --pp 2 [--net nvlink-ib] …`: the analytical side
 * of a parallel run (docs/design.md#the-plan-cost-model) without opening a GPU — the validated
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
 * Memory per rank also shows the peak activation bytes of the tapes, counted from the model's own forward
 * (src/perf/activation_memory.ts); with `--measure` they are printed beside the
 * measured pool peak, which also holds activation gradients and kernel workspaces, so both
 * figures and their ratio are shown rather than a pretended equality.
 * The predicted report is src/perf/plan_prediction.ts's (formatting helpers: plan_report.ts),
 * the measured step's accounting src/perf/measure.ts's; without `--measure` this command
 * prints predictions only. With `--device P` (and `--net`) it also prices the step — time, MFU, TFLOP/s per
 * device, breakdown, worst rank's memory — by step_time.ts predictStep, the function `--search` ranks plans by
 * (src/perf/fixed_plan_price.ts), and `--json FILE` writes that price; `--model` prices a preset or dimensions
 * instead of the training flags' model, the closed forms only. `--search` and `--advise` (the performance model choosing a plan and
 * criticising a shape) are src/cli/plan_search.ts's.
 */
import { trainHelp } from './args.ts';
import { checkCommand, maxWorldOf, type PlanCliOptions, PlanCliSchema } from './command.ts';
import { flagKeys, helpLines } from './flags.ts';
import type { TrainConfig } from '../train/config.ts';
import type { Backend } from '../gpu/device.ts';
import { NetworkModel } from '../comm/network.ts';
import { PlanSchema } from '../parallel/plan/plan_schema.ts';
import { MAX_PLAN_WORLD, MAX_RUN_WORLD } from '../parallel/plan/limits.ts';
import { planModelOf } from '../parallel/run/run.ts';
import {
  checkPlan,
  describePlan,
  makePlan,
  type ParallelPlan,
  type PlanModel,
  planWorldSize,
} from '../parallel/plan/plan.ts';
import { runFactsOf } from '../parallel/plan/mesh_plan.ts';
import { splitArchHelp } from '../parallel/plan/splits.ts';
import type { TrafficOptions } from '../parallel/cost/cost.ts';
import { activationComparison } from '../perf/plan_report.ts';
import { predictionReport } from '../perf/plan_prediction.ts';
import { deviceProfile, networkOf } from '../perf/device_profile.ts';
import { parseModel } from '../perf/model_presets.ts';
import type { StepPrediction } from '../perf/step_time.ts';
import { priceFixedPlan, priceJson, priceLines, stepOptionsOf, unpricedNotes } from '../perf/fixed_plan_price.ts';
import { loadTrainingData } from '../io/corpus.ts';
import { runCli } from './main.ts';
import { isSearchArgv, planSearchMain } from './plan_search.ts';
import { calibrateMain, isCalibrateArgv } from './plan_calibrate.ts';

const HELP =
  `npm run plan -- [flags]      predict memory, communication, the pipeline timeline and (--device) the step time of a parallel plan
  world size dp·pp·cp·tp ≤ ${MAX_PLAN_WORLD} (≤ ${MAX_RUN_WORLD} with --measure); ep divides dp; a MoE model is ${
    splitArchHelp('ep')
  }
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
 * parallel `npm run train` builds them), then the model (planModelOf, as the run's) and the plan checked
 * by the plan's rules (one table, src/parallel/plan/rules.ts) as a run's are. `flags` are PlanCliSchema's values and the --net text.
 * @throws Error naming the bad flag, config key or --config file, or every broken plan rule.
 */
export async function planFromArgs(
  argv: string[],
): Promise<
  {
    plan: ParallelPlan;
    model: PlanModel;
    cfg: TrainConfig;
    /** The tokenizer's V (`model.vocabSize` is padded as the run pads it). */
    vocabSize: number;
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
    return { plan: makePlan(), model: {} as PlanModel, cfg: {} as TrainConfig, vocabSize: 0, flags, help: true };
  }
  if (flags.model !== undefined && cfg.arch !== 'gpt') {
    throw new Error(`--model prices a GPT of the given shape; --arch ${cfg.arch} does not apply (drop one of them)`);
  }
  const vocab = flags.model !== undefined ? 0 : await vocabSize(cfg, flags.vocabSize);
  const model = flags.model !== undefined ? presetModel(flags.model) : planModelOf(plan, cfg, vocab);
  checkPlan(plan, model, undefined, runFactsOf(cfg), maxWorldOf('plan', args.options));
  return { plan, model, cfg, vocabSize: vocab, flags, help: false };
}

/** The PlanModel of `--model` (a preset or dimensions, parsed as --search parses it). */
function presetModel(text: string): PlanModel {
  const { nLayer, nHead, nEmbd, blockSize, vocabSize, batchSize } = parseModel(text);
  return { nLayer, nHead, nEmbd, blockSize, vocabSize, batchSize };
}

/**
 * The price of the fixed plan argv describes (step_time.ts predictStep via fixed_plan_price.ts, the search's
 * pricing), or undefined without --device.
 * @throws Error as {@link planFromArgs}, for an unknown --device, or for a plan the step-time model does not cover.
 */
export async function fixedPlanPrice(argv: string[]): Promise<StepPrediction | undefined> {
  const { plan, model, cfg, flags: f } = await planFromArgs(argv);
  if (f.device === undefined) return undefined;
  const dev = await deviceProfile(f.device);
  return priceFixedPlan(plan, model, stepOptionsOf(cfg), dev, networkOf(dev, f.net));
}

/** The price section (and --json's file) of `plan`, or one line on how to get it without --device. */
async function priceSection(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  f: PlanCliOptions & { net?: string },
  planNet: NetworkModel,
): Promise<string> {
  if (f.device === undefined) {
    if (f.json !== undefined || f.model !== undefined) {
      throw new Error(
        `--${f.json !== undefined ? 'json' : 'model'} prices the step and needs --device <preset|profile.json>`,
      );
    }
    return 'step time: not predicted; add --device <preset|profile.json> (and --net) to price it as --search does';
  }
  const dev = await deviceProfile(f.device), o = stepOptionsOf(cfg);
  const net = f.net === undefined && dev.dataPlanes ? networkOf(dev, undefined) : planNet; // a calibrated link
  let p: StepPrediction;
  try {
    p = priceFixedPlan(plan, model, o, dev, net);
  } catch (e) {
    if (f.json !== undefined) throw e;
    return `step time: not predicted — ${(e as Error).message}`;
  }
  if (f.json !== undefined) await Deno.writeTextFile(f.json, JSON.stringify(priceJson(p), null, 2) + '\n');
  return [...priceLines(p, dev, o, net, unpricedNotes(plan)), ...(f.json !== undefined ? [`  wrote ${f.json}`] : [])]
    .join('\n');
}

/** Runs the CLI; returns the text it printed. */
export async function main(argv: string[]): Promise<string> {
  if (isSearchArgv(argv)) return await planSearchMain(argv); // the performance model: src/cli/plan_search.ts
  if (isCalibrateArgv(argv)) return await calibrateMain(argv); // measuring this machine: src/cli/plan_calibrate.ts
  const { plan, model, cfg, vocabSize: vocab, flags: f, help } = await planFromArgs(argv);
  if (help) {
    console.log(HELP + trainHelp());
    return HELP;
  }
  const net = NetworkModel.parse(f.net ?? 'nvlink-ib');
  if (f.model !== undefined) {
    // A model at any scale: the closed forms only (the report below runs each rank's model over the meta GPU).
    const text = [
      `plan     ${describePlan(plan)}`,
      `model    ${f.model}: ${model.nLayer} layers · ${model.nHead} heads · hidden ${model.nEmbd} · seq ${model.blockSize} · vocab ${model.vocabSize} · global batch ${model.batchSize}`,
      await priceSection(plan, model, cfg, f, net),
    ].join('\n');
    console.log(text);
    return text;
  }
  const opts: TrafficOptions = {
    algorithm: f.algorithm,
    topK: cfg.moeTopK,
    capacityFactor: cfg.capacityFactor,
    bias: cfg.bias,
    trainer: 'mesh', // the trainer of every plan the rules accept (plan/strategy.ts)
  };
  const world = planWorldSize(plan), me = f.rank;
  if (me >= world) throw new Error(`--rank ${me} is outside the plan's ${world} ranks`);
  const report = await predictionReport(plan, model, cfg, vocab, net, opts, f), acts = report.acts;
  const text = `${report.text}\n\n${await priceSection(plan, model, cfg, f, net)}`;
  console.log(text);
  if (!f.measure) return text;
  const { tokenizer, texts } = await loadTrainingData(cfg);
  if (texts.length !== 1) {
    throw new Error(`--measure trains on one data file; got a mixture of ${texts.length} (${cfg.data})`);
  }
  const data = { tokens: tokenizer.encode(texts[0]), vocabSize: tokenizer.vocabSize };
  const measured = await (await import('../perf/measure.ts')).measure(plan, cfg, data, f.gpu); // --gpu picks the ranks' WebGPU, as for train
  const peaks = new Map(measured.ranks.map((r) => [r.rank, r.memory.peakPool]));
  const both = `${measured.text}\n\n${activationComparison(acts, peaks)}`;
  console.log(`\n${both}`);
  return `${text}\n\n${both}`;
}

if (import.meta.main) await runCli(main);
