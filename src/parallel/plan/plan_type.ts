/**
 * The ParallelPlan type, as one zod schema (docs/design.md#parallel-strategies): its fields, their
 * defaults (a single rank) and its type are this schema's output, so the plan the flags build
 * (plan_schema.ts planFromOptions) and the plan every module reads cannot drift apart. The schema
 * checks only the kinds of the fields; the rules between them and the model are rules.ts's table.
 */
import { z } from 'zod';
import type { CompressPolicy } from '../../comm/compression.ts';
import type { SyncSpec } from '../data/low_comm.ts';
import type { ScheduleKind } from '../pipeline/pipeline_schedule.ts';

export type CpKind = 'ring' | 'ulysses';
export const CP_KINDS: readonly CpKind[] = ['ring', 'ulysses'];
/**
 * The trainer that runs a plan (strategy.ts `strategyOf`): the mesh trainer for every plan. Kept
 * as a type because run summaries, traces and checkpoints record it.
 */
export type StrategyKind = 'mesh';

/** A degree: any number here; rules.ts names one that is not a positive integer. */
const degree = (what: string) => z.number().default(1).describe(what);

export const ParallelPlanSchema = z.object({
  dp: degree('data-parallel degree'),
  pp: degree('pipeline stages'),
  cp: degree('context-parallel degree'),
  tp: degree('tensor-parallel degree'),
  /** Expert-parallel degree; must divide dp (experts are spread over part of each DP group). */
  ep: degree('expert-parallel degree inside dp'),
  /** ZeRO stage over the DP group: 0 off, 1 optimizer state, 2 + gradients, 3 + parameters. */
  zero: z.custom<0 | 1 | 2 | 3>((x) => typeof x === 'number').default(0),
  /** Megatron sequence parallelism on top of tp. */
  sp: z.boolean().default(false),
  schedule: z.custom<ScheduleKind>((x) => typeof x === 'string').default('1f1b'),
  /** Model chunks per pipeline rank (interleaved 1F1B only; 1 otherwise). */
  virtualStages: degree('model chunks per pipeline rank'),
  microBatches: degree('micro-batches per optimizer step'),
  cpKind: z.custom<CpKind>((x) => typeof x === 'string').default('ring'),
  /** Compression per parallel dimension (comm/compression.ts); absent: none. */
  compress: z.custom<CompressPolicy>().optional(),
  /** Low-communication data parallelism (low_comm.ts); absent: DDP, every step. */
  sync: z.custom<SyncSpec>().optional(),
});

/** The degrees of every strategy of one run (see {@link ParallelPlanSchema}). */
export type ParallelPlan = z.output<typeof ParallelPlanSchema>;

/** Single rank, no sharding, 1F1B with one micro-batch, ring attention when cp > 1. */
export const DEFAULT_PLAN: Readonly<ParallelPlan> = ParallelPlanSchema.parse({});

/** `DEFAULT_PLAN` with `over` applied (no checks; see rules.ts checkPlan). */
export const makePlan = (over: Partial<ParallelPlan> = {}): ParallelPlan => ({ ...DEFAULT_PLAN, ...over });

/** dp·pp·cp·tp: the ranks a plan occupies. */
export const planWorldSize = (p: ParallelPlan) => p.dp * p.pp * p.cp * p.tp;
