/**
 * The parallel flags of `npm run train` and `npm run plan` as one zod schema: the CLIs derive
 * their flags, --help and defaults from it, and {@link planFromOptions} turns its values into
 * the {@link ParallelPlan} both commands check. Micro-batches default to the config's
 * gradAccum: the global batch batchSize × gradAccum is then split as a single-rank run with
 * gradient accumulation splits it.
 */
import { z } from 'zod';
import { type PlanModel, rankParams } from './plan.ts';
import { CP_KINDS, type CpKind, type ParallelPlan, ParallelPlanSchema, planWorldSize } from './plan_type.ts';
import { splitArchHelp } from './splits.ts';
import { SCHEDULE_KINDS, type ScheduleKind } from '../pipeline/pipeline_schedule.ts';
import { NET_PRESETS, parseNetwork } from '../../comm/network.ts';
import { parseCompressPolicy } from '../../comm/compression.ts';
import { SyncFlagsSchema, syncSpecOf } from '../data/low_comm.ts';
import { DATA_PLANES, type DataPlane, regionBytesFor } from '../../comm/data_plane.ts';
import { MAX_PLAN_WORLD } from './limits.ts';
import { limitProblems } from './rules.ts';

/** Micro-batches per optimizer step. */
export const MAX_MICRO_BATCHES = 65_536;

const degree = (what: string) => z.number().int().min(1).max(MAX_PLAN_WORLD).default(1).describe(what);

/** A --net description: a preset or `intra=…;inter=…;node=…`, checked by the network parser. */
const netSpec = z.string().superRefine((text, ctx) => {
  try {
    parseNetwork(text);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: `'${text}': ${(e as Error).message}` });
  }
});

export const PlanSchema = z.object({
  dp: degree('data-parallel degree; world size = dp·pp·cp·tp'),
  tp: degree(`tensor-parallel degree (divides nEmbd and nHead; ${splitArchHelp('tp')})`),
  pp: degree(`pipeline stages (divide nLayer; ${splitArchHelp('pp')})`),
  cp: degree(
    `context-parallel degree (ring: divides blockSize/2; ulysses: blockSize and heads; ${splitArchHelp('cp')})`,
  ),
  ep: degree(`expert-parallel degree inside dp (divides dp and nExpert; ${splitArchHelp('ep')})`),
  zero: z.number().int().min(0).max(3).default(0).describe(
    'ZeRO stage over dp: 1 optimizer state, 2 + gradients, 3 + parameters',
  ),
  sp: z.boolean().default(false).describe(`Megatron sequence parallelism (needs tp > 1; ${splitArchHelp('sp')})`),
  microBatches: z.number().int().min(1).max(MAX_MICRO_BATCHES).optional()
    .describe('micro-batches splitting the global batch batchSize × gradAccum (unset: gradAccum)'),
  ppSchedule: z.enum(SCHEDULE_KINDS as [ScheduleKind, ...ScheduleKind[]]).default('1f1b').describe(
    `pipeline schedule (--schedule ${SCHEDULE_KINDS.join('|')} also works; zb-h1: micro-batches ≥ pp, no ZeRO-3)`,
  ),
  virtualStages: z.number().int().min(1).max(1024).default(1).describe('model chunks per pipeline rank (interleaved)'),
  cpKind: z.enum(CP_KINDS as [CpKind, ...CpKind[]]).default('ring').describe('context-parallel attention'),
  compress: z.string().default('none').superRefine((text, ctx) => {
    try {
      parseCompressPolicy(text);
    } catch (e) {
      ctx.addIssue({ code: 'custom', message: (e as Error).message });
    }
  }).describe(
    'compression per dimension, e.g. dp=powersgd:4,tp=fp16,pp=int8 (schemes: none, fp16, bf16, int8[:block], int4[:block], topk[:density], sign, powersgd[:rank], dp only), or naive:<scheme>',
  ),
  ...SyncFlagsSchema,
  dataPlane: z.enum(DATA_PLANES as [DataPlane, ...DataPlane[]]).optional().describe(
    'how worker ranks exchange tensors: shared (SharedArrayBuffer rings) or message (MessagePorts); default shared where SharedArrayBuffer is usable, else message with the reason shown',
  ),
  regionMb: z.number().positive().max(4096).optional().describe(
    'shared data plane: MiB per ring (one per ordered pair of ranks); default twice the largest message the plan can send',
  ),
  net: netSpec.optional().describe(
    `network model: ${Object.keys(NET_PRESETS).join(' | ')} or 'intra=…GB/s,…us;inter=…;node=N'`,
  ),
});

export type PlanOptions = z.infer<typeof PlanSchema>;

/**
 * The plan `options` describe for a config with `gradAccum` (micro-batches default to it), not
 * yet checked against the model (see rules.ts checkPlan): the plan schema (plan_type.ts) parses what they map to.
 * @param maxWorld the most ranks allowed: limits.ts MAX_RUN_WORLD for a real run, MAX_PLAN_WORLD for a prediction.
 * @throws Error naming the flags when the world size or the pipeline schedule exceeds its maximum (the rule table's
 *   limit rules, limits.ts).
 */
export function planFromOptions(
  options: Partial<PlanOptions>,
  cfg: { gradAccum: number },
  maxWorld: number,
): ParallelPlan {
  const o = PlanSchema.parse(options);
  const plan = ParallelPlanSchema.parse({
    dp: o.dp,
    tp: o.tp,
    pp: o.pp,
    cp: o.cp,
    ep: o.ep,
    zero: o.zero,
    sp: o.sp,
    microBatches: o.microBatches ?? cfg.gradAccum,
    schedule: o.ppSchedule,
    virtualStages: o.virtualStages,
    cpKind: o.cpKind,
    compress: parseCompressPolicy(o.compress),
    sync: syncSpecOf(o),
  });
  if (plan.sync === undefined) delete plan.sync; // DDP: the field absent, as in a plan made in code
  // The table's limit rules (limits.ts), before a model is built: the flags alone decide them.
  const over = limitProblems(plan, maxWorld);
  if (over.length) throw new Error(over.join('; '));
  return plan;
}

/**
 * Bytes per shared-plane ring for `plan` on `model` (docs/design.md#the-shared-data-plane-of-worker-ranks): `regionMb`
 * when given, else room for twice the largest message the run can send — bounded by the largest of a rank's parameters
 * (a whole gradient bucket or gathered parameter unit) and the global batch's activations or vocabulary-wide rows
 * (B·T·max(C, V) elements), 4 bytes each — capped at 256 MiB.
 */
export function planRegionBytes(plan: ParallelPlan, model: PlanModel, regionMb?: number): number {
  if (regionMb !== undefined) return regionBytesFor(0, regionMb);
  let params = 0;
  for (let r = 0; r < planWorldSize(plan); r++) {
    const p = rankParams(plan, model, r);
    params = Math.max(params, p.dense + p.expert);
  }
  const rows = model.batchSize * model.blockSize * Math.max(model.nEmbd, model.vocabSize);
  return Math.min(256 << 20, regionBytesFor(4 * Math.max(params, rows)));
}
