/**
 * The predicted half of `npm run plan`'s report, from a validated plan and model alone: the plan,
 * model and network header, memory per rank (model state and the activation peak counted from the model),
 * the elements every rank sends per optimizer step by parallel dimension, one rank's traffic in
 * detail, and the pipeline schedule's bubble and dry-run timeline. Separate from src/cli/plan.ts,
 * which reads the flags and runs `--measure`, and from plan_report.ts, whose formatting helpers
 * it shares with a parallel run's accounting. No GPU: the activations run the model over a meta GPU (which reads
 * the shader sources).
 */
import type { TrainConfig } from '../train/config.ts';
import type { NetworkModel } from '../comm/network.ts';
import { p2pTimeUs } from '../comm/cost.ts';
import {
  describePlan,
  paddedVocab,
  type ParallelPlan,
  planGroup,
  type PlanModel,
  planWorldSize,
  rankCoords,
  zeroWorkingElements,
} from '../parallel/plan/plan.ts';
import type { CommRow, PlanDim, TrafficOptions } from '../parallel/cost/cost.ts';
import { compressionSection, rankStepTraffic } from './compression_report.ts';
import { rankMemory } from './memory_cost.ts';
import { bubbleFraction, dryRun } from '../parallel/pipeline/pipeline_sim.ts';
import { makeSchedule, peakInFlight } from '../parallel/pipeline/pipeline_schedule.ts';
import { type ActivationMemory, korthikantiLayerBytes, microBatchRows, planActivations } from './activation_memory.ts';
import { fmtBytes, fmtInt, groupLink, pct, rowTimeUs, table, timelineChart } from './plan_report.ts';

/** Every rank's activation memory (activation_memory.ts, counted from the model), or why none is predicted. */
export interface PredictedActivations {
  ranks?: ActivationMemory[];
  why?: string;
}

/** What the report shows beyond the plan: the rank in detail and the pipeline timeline's assumptions. */
export interface PredictionOptions {
  /** The rank whose traffic is shown call by call (and whose activations are set beside Korthikanti's). */
  rank: number;
  /** Assumed ms per stage and micro-batch of a forward and a backward, for the dry run. */
  forwardMs: number;
  backwardMs: number;
  /** Columns of the timeline chart. */
  width: number;
}

/**
 * The predicted report of `plan` for `model` on `net` (traffic rows per `traffic`), as the text
 * `npm run plan` prints, with the activation predictions a measured step is later set beside. `vocabSize` is the
 * tokenizer's V (`model.vocabSize` is padded as the run pads it).
 */
export async function predictionReport(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  vocabSize: number,
  net: NetworkModel,
  traffic: TrafficOptions,
  o: PredictionOptions,
): Promise<{ text: string; acts: PredictedActivations }> {
  const world = planWorldSize(plan), me = o.rank;
  const b = model.batchSize / (plan.dp * plan.microBatches), d = plan.dp * plan.cp;
  const out = [
    `plan     ${describePlan(plan)}`,
    `model    ${cfg.arch} · ${model.nLayer} layers · ${model.nHead} heads · width ${model.nEmbd} · context ${model.blockSize} · vocab ${model.vocabSize}` +
    `${cfg.padVocab > 1 ? ` (--pad-vocab ${cfg.padVocab})` : ''}${
      paddedVocab(model.vocabSize, plan.tp) !== model.vocabSize
        ? ` (padded to ${paddedVocab(model.vocabSize, plan.tp)})`
        : ''
    }${model.nExpert ? ` · ${model.nExpert} experts` : ''}` +
    ` · global batch ${model.batchSize} = dp ${plan.dp} × ${plan.microBatches} micro-batches × ${b} sequences`,
    `network  ${net}`,
    '',
    `memory per rank: fp32 AdamW (4 B parameter + 4 B gradient + 8 B optimizer state per element), ZeRO-${plan.zero} over dp·cp = ${d}` +
    (plan.zero >= 2
      ? `; working buffers of ${
        fmtInt(zeroWorkingElements(model, cfg.bias, plan.tp, undefined, plan.ep))
      } elements (embeddings, ln_f and one layer) for gathered ${plan.zero === 3 ? 'values and ' : ''}gradients`
      : ''),
  ];
  const ranks = [...Array(world).keys()];
  const acts = await activations(plan, cfg, vocabSize);
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
  out.push(activationNote(acts, plan, model, cfg, me), '');
  // Every rank's step as its model sends it (a meta step each), and rank me's without the compression policy.
  const rows = await Promise.all(ranks.map((r) => rankStepTraffic(plan, cfg, vocabSize, r, traffic)));
  const raw = plan.compress ? await rankStepTraffic(plan, cfg, vocabSize, me, traffic, true) : rows[me];
  out.push(
    ...trafficSection(plan, net, traffic, rows, me),
    ...compressionSection(plan, raw, rows[me], net, me),
    ...pipelineSection(plan, model, net, o, b),
  );
  return { text: out.join('\n'), acts };
}

/** The communication tables: elements every rank sends by dimension, then rank `me` call by call. */
function trafficSection(
  plan: ParallelPlan,
  net: NetworkModel,
  opts: TrafficOptions,
  traffic: CommRow[][],
  me: number,
): string[] {
  const out: string[] = [];
  const ranks = [...Array(planWorldSize(plan)).keys()];
  const dims: PlanDim[] = ['dp', 'tp', 'pp', 'cp', 'ep'];
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
    `rank ${me} in detail (${
      opts.algorithm ?? 'ring'
    } collectives; counted from the model's own step over the meta GPU; ≈ marks the outer sync's average per step):`,
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
  return out;
}

/** The pipeline schedule of rank `o.rank`'s pp group: bubble, assumed costs, in-flight peaks and the dry-run chart. */
function pipelineSection(
  plan: ParallelPlan,
  model: PlanModel,
  net: NetworkModel,
  o: PredictionOptions,
  b: number,
): string[] {
  const out: string[] = [];
  const sched = makeSchedule(plan.schedule, plan.pp, plan.microBatches, plan.virtualStages);
  const act =
    (plan.sp
      ? b * (model.blockSize / plan.cp) * model.nEmbd / plan.tp
      : b * (model.blockSize / plan.cp) * model.nEmbd) * 4;
  const ppGroup = planGroup(plan, 'pp', o.rank);
  const costs = {
    forwardMs: o.forwardMs,
    backwardMs: o.backwardMs,
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
    timelineChart(dry, o.width),
    '  legend: a…z forward of micro-batch 0…25, A…Z its backward, ~ transfer, . idle',
  );
  return out;
}

/** Every rank's activation memory, or why there is none (a split the model does not take). */
async function activations(plan: ParallelPlan, cfg: TrainConfig, vocabSize: number): Promise<PredictedActivations> {
  try {
    return { ranks: await planActivations(cfg, plan, vocabSize) };
  } catch (e) {
    return { why: (e as Error).message };
  }
}

/** How the activation column was computed, with rank `me`'s layer beside Korthikanti et al.'s fp16 count. */
function activationNote(
  acts: PredictedActivations,
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  me: number,
): string {
  if (!acts.ranks) return `  activations: not predicted — ${acts.why}`;
  const a = acts.ranks[me], b = microBatchRows(cfg, plan), s = model.blockSize / plan.cp;
  const k = korthikantiLayerBytes(s, b, model.nEmbd, model.nHead, plan.tp, plan.sp), arch = cfg.arch;
  const widths = cfg.precision === 'f32'
    ? 'fp32'
    : `fp32 + ${
      cfg.precision === 'f16-mixed' ? 'f16' : 'bf16-in-f32'
    } copies of the linear and attention inputs and weights`;
  const head =
    `  activations: peak of the tensors the autograd tapes keep, counted from the model's forward over a meta GPU (${widths}; ${arch}; src/perf/activation_memory.ts): the peak over the schedule, ≈ one micro-batch × the most in flight;\n` +
    `  rank ${me} (${a.kind} trainer): ${fmtBytes(a.perMicroBatch)} per micro-batch, ${fmtBytes(a.perLayer)} per layer`;
  if (arch !== 'gpt') return `${head} (Korthikanti et al.'s transformer count is for the GPT layer)`;
  return `${head} — ` +
    `Korthikanti et al. (arXiv 2205.05198) fp16 ${
      plan.tp > 1 ? (plan.sp ? 'sbh/t·(34 + 5as/h)' : 'sbh(10 + 24/t + 5as/(ht))') : 'sbh(34 + 5as/h)'
    } = ${fmtBytes(k)} per layer`;
}
