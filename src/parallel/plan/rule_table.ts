/**
 * The rules of a parallel plan, as one ordered table (rules.ts runs it; docs/design.md#parallel-strategies). Each
 * entry keeps one rule with its message; the order is the order the messages are listed in.
 */
import type { PlanFacts, PlanRule, RunFacts } from './rules.ts';
import { CP_KINDS, type ParallelPlan, planWorldSize } from './plan_type.ts';
import { SCHEDULE_KINDS } from '../pipeline/pipeline_schedule.ts';
import { pipelineBlocks } from '../../models/archs.ts';
import { SPLIT_ARCHS, type SplitDim } from './splits.ts';
import { RUN_RULES } from './run_rules.ts';
import { LIMIT_RULES } from './limits.ts';

const div = (a: number, b: number) => a % b === 0;
const on = (x: boolean | number) => x === true || (x as number) > 1;
const DEGREES = ['dp', 'pp', 'cp', 'tp', 'ep', 'virtualStages', 'microBatches'] as const;
const MODEL_INTS = ['nLayer', 'nHead', 'nEmbd', 'blockSize', 'batchSize', 'vocabSize'] as const;
const SPLITS: SplitDim[] = ['tp', 'sp', 'pp', 'cp'];
const isRd = (f: PlanFacts) => f.run?.arch === 'recurrent-depth';
/** The low-communication method's flag, for the sync rules' messages. */
const syncFlag = (p: ParallelPlan) => `--sync ${p.sync!.method}`;
const hasSync = (f: PlanFacts) => f.plan.sync !== undefined;
const stages = (p: ParallelPlan) => p.pp * (p.schedule === 'interleaved' ? p.virtualStages : 1);

/** Context parallelism's and sp's cuts of the sequence. */
const SEQUENCE_RULES: PlanRule[] = [
  {
    id: 'ring-sequence',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { cp, cpKind }, model: { blockSize: T } }) =>
      cp > 1 && cpKind === 'ring' && !div(T, 2 * cp)
        ? `sequence ${T} not divisible by cp·2 = ${2 * cp} for zig-zag ring attention`
        : null,
  },
  {
    id: 'ulysses-sequence',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { cp, cpKind }, model: { blockSize: T } }) =>
      cp > 1 && cpKind === 'ulysses' && !div(T, cp) ? `sequence ${T} not divisible by cp ${cp}` : null,
  },
  {
    // Only when tp divides the heads: otherwise tp-divides-heads has said it.
    id: 'ulysses-heads',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { cp, cpKind, tp }, model: { nHead: h } }) => {
      if (cp === 1 || cpKind !== 'ulysses' || !div(h, tp) || div(h / tp, cp)) return null;
      return tp > 1
        ? `heads per TP rank ${h / tp} not divisible by the Ulysses degree cp ${cp}`
        : `heads ${h} not divisible by the Ulysses degree cp ${cp}`;
    },
  },
  {
    id: 'sp-sequence',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { sp, tp, cp }, model: { blockSize: T } }) =>
      sp && tp > 1 && div(T, cp) && !div(T / cp, tp)
        ? `sequence ${T / cp} per CP rank not divisible by tp ${tp} for sequence parallelism`
        : null,
  },
];

/** The table, in the order its messages are listed. */
export const PLAN_RULES: readonly PlanRule[] = [
  ...DEGREES.map((k): PlanRule => ({
    id: `positive-${k}`,
    group: 'shape',
    check: ({ plan }) =>
      Number.isInteger(plan[k]) && plan[k] >= 1 ? null : `${k} must be a positive integer, got ${plan[k]}`,
  })),
  ...MODEL_INTS.map((k): PlanRule => ({
    id: `model-${k}`,
    group: 'shape',
    needs: 'model',
    check: ({ model: m }) =>
      Number.isInteger(m[k]) && m[k] >= 1 ? null : `model ${k} must be a positive integer, got ${m[k]}`,
  })),
  {
    id: 'zero-stage',
    group: 'shape',
    check: ({ plan: { zero } }) => [0, 1, 2, 3].includes(zero) ? null : `zero must be 0, 1, 2 or 3, got ${zero}`,
  },
  {
    id: 'schedule-kind',
    group: 'shape',
    check: ({ plan: { schedule: s } }) =>
      SCHEDULE_KINDS.includes(s) ? null : `schedule '${s}' is not one of ${SCHEDULE_KINDS.join(', ')}`,
  },
  {
    id: 'cp-kind',
    group: 'shape',
    check: ({ plan: { cpKind: k } }) =>
      CP_KINDS.includes(k) ? null : `cpKind '${k}' is not one of ${CP_KINDS.join(', ')}`,
  },
  ...LIMIT_RULES,
  ...SPLITS.map((dim): PlanRule => ({
    id: `arch-${dim}`,
    group: 'arch',
    needs: 'run',
    check: ({ plan, run: { arch } }) => {
      const { archs, why } = SPLIT_ARCHS[dim], x = plan[dim];
      if (!on(x) || archs.includes(arch)) return null;
      return `${x === true ? dim : `${dim} ${x}`} does not apply to --arch ${arch}: ${why} (allowed: ${
        archs.join(', ')
      })`;
    },
  })),
  {
    // With the run's architecture known, ep names it; a bare model says what it lacks.
    id: 'ep-needs-experts',
    group: 'arch',
    applies: (f) => f.plan.ep > 1 && (f.run !== undefined || f.model !== undefined),
    check: ({ plan: { ep }, run, model }) => {
      if (run) {
        return SPLIT_ARCHS.ep.archs.includes(run.arch)
          ? null
          : `ep ${ep} needs --arch ${SPLIT_ARCHS.ep.archs.join(' or ')}, got ${run.arch}`;
      }
      return model.nExpert ? null : `ep ${ep} needs a mixture-of-experts model (nExpert)`;
    },
  },
  {
    id: 'tp-divides-width',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { tp }, model: { nEmbd } }) =>
      div(nEmbd, tp) ? null : `nEmbd ${nEmbd} is not divisible by tp ${tp}`,
  },
  {
    id: 'tp-divides-heads',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { tp }, model: { nHead } }) => div(nHead, tp) ? null : `heads ${nHead} not divisible by tp ${tp}`,
  },
  {
    id: 'sp-needs-tp',
    group: 'plan',
    check: ({ plan: { sp, tp } }) => sp && tp === 1 ? 'sequence parallel (sp) requires tp > 1' : null,
  },
  {
    id: 'sync-needs-dp',
    group: 'plan',
    applies: hasSync,
    check: ({ plan: p }) => p.dp < 2 ? `${syncFlag(p)} needs dp ≥ 2 workers to synchronise (got dp ${p.dp})` : null,
  },
  {
    id: 'sync-needs-zero-0',
    group: 'plan',
    applies: hasSync,
    check: ({ plan: p }) =>
      p.zero
        ? `${syncFlag(p)} needs zero 0: each worker keeps its own whole optimizer state between outer steps`
        : null,
  },
  {
    id: 'sync-needs-ep-1',
    group: 'plan',
    applies: hasSync,
    check: ({ plan: p }) =>
      p.ep > 1 ? `${syncFlag(p)} needs ep 1: experts spread over dp ranks cannot train apart` : null,
  },
  {
    id: 'sync-needs-cp-1',
    group: 'plan',
    applies: hasSync,
    check: ({ plan: p }) => p.cp > 1 ? `${syncFlag(p)} needs cp 1 (a worker is a dp replica of tp × pp ranks)` : null,
  },
  {
    id: 'sync-no-dp-compress',
    group: 'plan',
    applies: hasSync,
    check: ({ plan: p }) =>
      p.compress && p.compress.dp.kind !== 'none'
        ? `${syncFlag(p)} sends outer gradients, not per-step gradients: use --outer-quant instead of --compress dp=…`
        : null,
  },
  {
    id: 'zero-needs-group',
    group: 'plan',
    check: ({ plan: { zero, dp, cp } }) =>
      zero > 0 && dp * cp === 1 ? `zero ${zero} shards over the dp·cp group and requires dp·cp > 1` : null,
  },
  {
    id: 'zero-no-powersgd',
    group: 'plan',
    check: ({ plan: { zero, compress } }) =>
      zero > 0 && compress?.dp.kind === 'powersgd'
        ? `--compress dp=powersgd needs zero 0: PowerSGD all-reduces low-rank factors of whole gradient matrices, ZeRO reduce-scatters flat buckets; with zero ${zero} use an elementwise scheme (fp16, bf16, int8, int4, topk, sign)`
        : null,
  },
  {
    // recurrent-depth's stages split its pieces, said in those terms by the next rule.
    id: 'layers-per-stage',
    group: 'plan',
    needs: 'model',
    applies: (f) => !(isRd(f) && f.run!.preludeLayers !== undefined),
    check: ({ plan: { pp, virtualStages: v }, model: { nLayer } }) => {
      if (div(nLayer, pp * v)) return null;
      return v > 1
        ? `layers ${nLayer} not divisible by pp·virtualStages = ${pp}·${v}`
        : `layers ${nLayer} not divisible by pp ${pp}`;
    },
  },
  {
    id: 'recurrent-depth-pieces',
    group: 'run',
    needs: 'run',
    applies: (f) => isRd(f) && f.run!.preludeLayers !== undefined,
    check: ({ plan, run }) => {
      const pieces = pipelineBlocks(run as Required<RunFacts>), s = stages(plan);
      return div(pieces, s)
        ? null
        : `pipeline: recurrent-depth's stages split its pieces, preludeLayers + 1 (the core, every iteration) + codaLayers = ${run.preludeLayers} + 1 + ${run.codaLayers} = ${pieces}, not nLayer; ${pieces} is not divisible by pp·v = ${s} (change preludeLayers or codaLayers)`;
    },
  },
  {
    id: 'virtual-stages-need-interleaved',
    group: 'plan',
    check: ({ plan: { virtualStages: v, schedule } }) =>
      v > 1 && schedule !== 'interleaved' ? `virtualStages ${v} needs schedule interleaved (got ${schedule})` : null,
  },
  {
    id: 'interleaved-needs-pp',
    group: 'plan',
    check: ({ plan: { schedule, pp } }) =>
      schedule === 'interleaved' && pp === 1 ? 'schedule interleaved requires pp > 1' : null,
  },
  {
    id: 'interleaved-needs-chunks',
    group: 'plan',
    check: ({ plan: { schedule, virtualStages: v } }) =>
      schedule === 'interleaved' && v < 2 ? 'schedule interleaved requires virtualStages ≥ 2' : null,
  },
  {
    id: 'interleaved-micro-batches',
    group: 'plan',
    check: ({ plan: { schedule, microBatches: m, pp } }) =>
      schedule === 'interleaved' && !div(m, pp)
        ? `interleaved 1F1B needs micro-batches ${m} divisible by pp ${pp}`
        : null,
  },
  {
    id: 'zb-h1-micro-batches',
    group: 'plan',
    check: ({ plan: { schedule, microBatches: m, pp } }) =>
      schedule === 'zb-h1' && m < pp ? `--schedule zb-h1 needs micro-batches ${m} ≥ pp ${pp}` : null,
  },
  {
    // W fires the gradient syncs (DDP buckets, ZeRO-1/2's reduce-scatters); tp, sp, cp and ep collectives
    // run in B. ZeRO-3's B would need each layer's values gathered before its rules: not wired yet.
    id: 'zb-h1-zero3',
    group: 'plan',
    check: ({ plan: p }) =>
      p.schedule === 'zb-h1' && p.zero === 3
        ? '--schedule zb-h1 does not compose with ZeRO-3 yet (dp, tp, sp, cp, ep and ZeRO-1/2 do) (rule zb-h1-zero3)'
        : null,
  },
  ...SEQUENCE_RULES,
  {
    id: 'batch-per-micro-batch',
    group: 'plan',
    needs: 'model',
    check: ({ plan: { microBatches: m, dp }, model: { batchSize: b } }) =>
      div(b, m * dp) ? null : `batch ${b} not divisible by micro-batches × dp (${m} × ${dp})`,
  },
  {
    id: 'ep-divides-dp',
    group: 'plan',
    check: ({ plan: { ep, dp } }) => div(dp, ep) ? null : `ep must divide dp (ep ${ep}, dp ${dp})`,
  },
  {
    id: 'experts-per-ep',
    group: 'plan',
    needs: 'model',
    applies: (f) => f.model?.nExpert !== undefined,
    check: ({ plan: { ep }, model: { nExpert: e } }) => {
      if (!Number.isInteger(e) || e! < 1) return `nExpert must be a positive integer, got ${e}`;
      return div(e!, ep) ? null : `experts ${e} not divisible by ep ${ep}`;
    },
  },
  ...RUN_RULES,
  {
    id: 'world-size',
    group: 'plan',
    needs: 'worldSize',
    check: ({ plan: p, worldSize: w }) =>
      w === planWorldSize(p)
        ? null
        : `world size ${w} ≠ dp·pp·cp·tp = ${p.dp}·${p.pp}·${p.cp}·${p.tp} = ${planWorldSize(p)}`,
  },
];
