/**
 * The flags of `npm run train` (single-rank and parallel) and `npm run plan` in one place: which
 * schemas each command reads, and {@link checkCommand}, the parse-and-validate path a fresh run
 * of either takes before anything is allocated — flags, then the config (preset, --config file,
 * flags), then the parallel plan, built by the same {@link planFromOptions} for both.
 */
import { z } from 'zod';
import { type ParsedTrainArgs, parseTrainArgs } from './args.ts';
import { freshConfig } from './config_file.ts';
import { flagKeys } from './flags.ts';
import type { TrainConfig } from '../train/config.ts';
import type { ParallelPlan } from '../parallel/plan/plan.ts';
import { planFromOptions, PlanSchema } from '../parallel/plan/plan_schema.ts';
import { MAX_PLAN_WORLD, MAX_RUN_WORLD, MAX_SEARCH_WORLD } from '../parallel/plan/limits.ts';
import { SCHEDULE_KINDS, type ScheduleKind } from '../parallel/pipeline/pipeline_schedule.ts';
import { parseNetwork } from '../comm/network.ts';
import { LaunchSchema } from './run_world.ts';
import { MAX_SEARCH_BATCH } from '../perf/plan_space.ts';

/** Largest vocabulary `npm run plan --vocab-size` models (GPT-2's is 50 257). */
export const MAX_VOCAB = 1 << 20;
/** Columns of plan's pipeline timeline. */
export const MAX_TIMELINE_WIDTH = 400;

/** `npm run plan`'s own flags, beside the parallel plan's and the training config's. */
export const PlanCliSchema = z.object({
  vocabSize: z.number().int().min(1).max(MAX_VOCAB).optional().describe(
    'vocabulary (unset: distinct characters of --data, or 50257 for gpt2)',
  ),
  algorithm: z.enum(['ring', 'recursive-doubling', 'rabenseifner', 'direct']).default('ring').describe(
    'collective algorithm priced',
  ),
  rank: z.number().int().min(0).max(MAX_PLAN_WORLD - 1).default(0).describe(
    'rank whose collectives are listed in detail',
  ),
  forwardMs: z.number().min(0).max(1e6).default(1).describe('timeline: forward ms per stage and micro-batch'),
  backwardMs: z.number().min(0).max(1e6).default(2).describe('timeline: backward ms per stage and micro-batch'),
  width: z.number().int().min(8).max(MAX_TIMELINE_WIDTH).default(64).describe('timeline columns'),
  measure: z.boolean().default(false).describe('also run one real step on in-process ranks, measured beside predicted'),
  device: z.string().optional().describe(
    'price the step (time, MFU, breakdown) on a device profile (h100-sxm, a100-80g, mi250x, m2-max, cpu-lavapipe) or a .json profile',
  ),
  model: z.string().optional().describe(
    "price this model instead of the training flags' (a preset or 'layers=…,heads=…,hidden=…,seq=…,vocab=…[,batch=…]', as --search); needs --device, prints the price only",
  ),
  json: z.string().optional().describe(
    'write the price to this file: { stepMs, mfu (fraction), tflopsPerDevice, breakdown (ms), memory (bytes) }; needs --device',
  ),
});
export type PlanCliOptions = z.infer<typeof PlanCliSchema>;

/**
 * `npm run plan -- --search` and `--advise`'s flags (src/cli/plan_search.ts): the performance
 * model's inputs instead of a plan's degrees (docs/design.md#a-performance-model-that-chooses-the-plan).
 */
export const PlanSearchSchema = z.object({
  search: z.boolean().default(false).describe(
    'rank every valid plan of --model on --world ranks by predicted step time',
  ),
  advise: z.string().optional().describe(
    "name the shape choices of a model that waste the device (a preset or 'layers=…,heads=…,hidden=…,seq=…,vocab=…')",
  ),
  world: z.number().int().min(1).max(MAX_SEARCH_WORLD).optional().describe('ranks to plan for (--search)'),
  model: z.string().optional().describe(
    "preset (gpt3-175b, llama2-70b, megatron-1.7b … megatron-1t) or 'layers=…,heads=…,hidden=…,seq=…,vocab=…'",
  ),
  device: z.string().default('h100-sxm').describe(
    'device profile (h100-sxm, a100-80g, mi250x, m2-max, cpu-lavapipe) or a .json profile / npm run bench output',
  ),
  net: z.string().default('nvlink-ib').superRefine((text, ctx) => {
    try {
      parseNetwork(text);
    } catch (e) {
      ctx.addIssue({ code: 'custom', message: `'${text}': ${(e as Error).message}` });
    }
  }).describe("network model: a preset or 'intra=…GB/s,…us;inter=…;node=N'"),
  globalBatch: z.number().int().min(1).max(MAX_SEARCH_BATCH).optional().describe(
    "sequences per optimizer step (unset: the preset's)",
  ),
  dtype: z.enum(['bf16', 'f32']).default('bf16').describe(
    "compute precision priced (bf16: mixed-precision memory; f32: this sandbox's)",
  ),
  attention: z.enum(['flash', 'naive']).default('flash').describe('attention kernel priced'),
  top: z.number().int().min(1).max(1000).default(10).describe('plans printed'),
  band: z.number().min(0).max(10).optional().describe(
    "--search: plans within this fraction of the best step time are marked '≈ best' (0.1 = 10%; unset: the model's largest error on Megatron's Table 1)",
  ),
  tp: z.number().int().min(1).max(MAX_SEARCH_WORLD).default(1).describe(
    '--advise: tensor-parallel degree the shape must split over',
  ),
  microBatch: z.number().int().min(1).max(1 << 16).default(1).describe('--advise: sequences per micro-batch'),
});
export type PlanSearchOptions = z.infer<typeof PlanSearchSchema>;

const PLAN_SCHEMA = PlanSchema.extend(PlanCliSchema.shape);

/** The flags of a parallel training run: the plan's and the CLI's launch flags (--transport, --comm-backend). */
export const PARALLEL_SCHEMA = PlanSchema.extend(LaunchSchema.shape);

/** Flag names of a parallel run (`--no-sp` included): any of them makes `npm run train` a parallel run. */
export const PARALLEL_FLAG_NAMES: readonly string[] = flagKeys(PARALLEL_SCHEMA).flatMap((
  k,
) => (k.kind === 'boolean' ? [k.flag, `no-${k.flag}`] : [k.flag]));

/** True when `argv` names any parallel flag, i.e. the run belongs to train_parallel.ts rather than the single-rank trainer. */
export function isParallelArgv(argv: string[]): boolean {
  return argv.some((a) => PARALLEL_FLAG_NAMES.some((f) => a === `--${f}` || a.startsWith(`--${f}=`)));
}

/**
 * `--schedule gpipe|1f1b|interleaved` → `--pp-schedule`: the training config's --schedule names
 * the learning-rate schedule, whose values never overlap the pipeline's.
 */
function aliasSchedule(argv: string[]): string[] {
  return argv.map((a, i) =>
    a === '--schedule' && SCHEDULE_KINDS.includes(argv[i + 1] as ScheduleKind)
      ? '--pp-schedule'
      : SCHEDULE_KINDS.some((k) => a === `--schedule=${k}`)
      ? a.replace('--schedule', '--pp-schedule')
      : a
  );
}

/**
 * Which command reads `argv`: `train` (a parallel run when {@link isParallelArgv}) or `plan`.
 * `parallel` is train_parallel.ts (the parallel flags are always its own).
 */
export type Command = 'train' | 'parallel' | 'plan';

/**
 * Parses `argv` for `command`: the training config's flags plus, for a parallel run, the
 * PlanSchema flags and, for plan, its own (PlanCliSchema); their values are in `options`.
 * @throws Error naming the flag (see parseTrainArgs), and for --init-from, --adapter or --subgroups
 *   outside a single-rank run.
 */
export function parseCommandArgs(argv: string[], command: Command): ParsedTrainArgs {
  if (command === 'train' && isParallelArgv(argv)) command = 'parallel';
  if (command === 'train') return parseTrainArgs(argv);
  const args = parseTrainArgs(aliasSchedule(argv), {}, command === 'plan' ? PLAN_SCHEMA : PARALLEL_SCHEMA);
  const where = command === 'plan' ? 'npm run plan' : 'a parallel run';
  if (args.initFrom !== undefined) {
    throw new Error(`--init-from loads a GPT-2 checkpoint into single-rank runs only; ${where} does not take it`);
  }
  const mpi = args.options.transport === 'mpi';
  if (args.adapter !== undefined && !mpi) {
    throw new Error(
      `--adapter picks the GPU of a single-rank run or of each MPI process (--transport mpi); ${where} over workers does not take it (its ranks share one adapter)`,
    );
  }
  if (args.subgroups !== undefined) {
    throw new Error(
      `--subgroups chooses the kernels of a single-rank run; ${where} does not take it (its ranks use the workgroup-memory kernels)`,
    );
  }
  return args;
}

/** The most ranks `command` allows: a real run's, or plan's (a real one again with --measure). */
export const maxWorldOf = (
  command: Command,
  options: Record<string, unknown>,
) => (command === 'plan' && !options.measure ? MAX_PLAN_WORLD : MAX_RUN_WORLD);

export interface CheckedCommand {
  args: ParsedTrainArgs;
  /** The fresh run's config; null with --help or --resume (whose config is the checkpoint's). */
  cfg: TrainConfig | null;
  /** The plan of a parallel run or of `npm run plan` (not yet checked against the model); null otherwise. */
  plan: ParallelPlan | null;
}

/**
 * Everything a fresh `command` run checks before it allocates: the flags, the config and the
 * plan (its world size and pipeline within their maxima). The CLIs take these same steps
 * (train.ts and train_parallel.ts with their --resume branch between them).
 * @throws Error naming the offending flag, config key or --config file.
 */
export async function checkCommand(argv: string[], command: 'train' | 'plan'): Promise<CheckedCommand> {
  const kind: Command = command === 'train' && isParallelArgv(argv) ? 'parallel' : command;
  const args = parseCommandArgs(argv, kind);
  if (args.help || (args.resume && kind !== 'plan')) return { args, cfg: null, plan: null };
  const cfg = await freshConfig(args);
  const plan = kind === 'train' ? null : planFromOptions(args.options, cfg, maxWorldOf(kind, args.options));
  return { args, cfg, plan };
}
