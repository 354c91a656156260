/**
 * Where each ZeRO bucket (zero_sync.ts) is reduced: over which ranks, and in which stage's
 * backward (docs/design.md#zero).
 *
 * Ranks ({@link ZeroGroups}). A parameter's optimizer state, reduced gradient and values are split
 * over exactly the ranks that hold a replica of it, those its gradient is averaged over without
 * ZeRO. Dense parameters: the dp·cp group. Under expert parallelism an expert's parameters live on
 * the dp/ep ranks holding the same experts (DeepSpeed-MoE's and Megatron's expert-data-parallel
 * group, `edp`), whose gradients are summed there and divided by dp (grad_sync.ts), so expert
 * buckets are sharded over that group instead.
 *
 * Stages ({@link stageUnits}): which local pipeline stage reduces and gathers each unit.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Communicator } from '../../comm/communicator.ts';
import { CompressedComm } from '../../comm/compressed.ts';
import type { Scheme } from '../../comm/compression.ts';
import type { Bucket } from '../data/buckets.ts';
import { subGroup } from '../data/data_parallel.ts';

/** One sharding group and how its reduce-scatters combine a bucket's gradients. */
export class ZeroGroup {
  /** This rank's index in the group and the group's size (1: the rank holds its buckets alone). */
  readonly rank: number;
  readonly size: number;
  /** The all-gathers of values (null when alone). */
  readonly params: Communicator | null;
  /** Evaluation's all-gathers, outside a step's accounting (null when alone). */
  readonly eval: Communicator | null;
  private readonly compressed: CompressedComm | null;

  /**
   * @param group the ranks sharing the buckets (null: this rank alone); `grads` its sub-group of
   *   the reduce-scatters; `scale` null to average over the group, else the factor applied to the
   *   group's sum (experts: 1/dp); `compress` the dp compression of the reduce-scatters.
   */
  constructor(
    gpu: Gpu,
    group: Communicator | null,
    readonly grads: Communicator | null,
    private readonly scale: number | null,
    compress?: Scheme,
  ) {
    this.rank = group?.rank ?? 0;
    this.size = group?.size ?? 1;
    this.params = group && subGroup(group, 'params');
    this.eval = group && subGroup(group, 'eval');
    this.compressed = grads && compress && compress.kind !== 'none' ? new CompressedComm(grads, gpu, compress) : null;
  }

  /** Prepares the compressed reduce-scatter of bucket `name` (c elements per rank). */
  prepare(name: string, c: number): void {
    this.compressed?.prepareReduceScatter(name, c);
  }

  /**
   * This rank's piece (c = padded.length / size elements) of the group's average of `padded`
   * (size·c elements), or of its sum times `scale`.
   * @throws (rejects with) a peer's failure or timeout.
   */
  async reduceScatter(padded: Float32Array, name: string): Promise<Float32Array> {
    const op = this.scale === null ? 'avg' : 'sum';
    const mine = !this.grads
      ? padded
      : this.compressed
      ? await this.compressed.reduceScatter(padded, { op, name })
      : await this.grads.reduceScatter(padded, { op });
    return this.scale === null ? mine : mine.map((x) => x * this.scale!);
  }

  /** The compressed reduce-scatters' error-feedback residuals (checkpoint state). */
  state(): Record<string, Tensor> {
    return this.compressed?.state() ?? {};
  }
}

/**
 * Under ep: which parameters are experts, and the expert-data-parallel group of this rank's
 * experts (null when it holds them alone) with its `grads` sub-group; their sum is divided by dp.
 */
export interface ExpertGroup {
  group: Communicator | null;
  grads: Communicator | null;
  isExpert: (name: string) => boolean;
  dp: number;
}

/** The group of every bucket: dense ones over dp·cp (averaged), under ep expert ones over their edp group. */
export class ZeroGroups {
  readonly dense: ZeroGroup;
  readonly expert: ZeroGroup | null;

  /** @param group the dp·cp group, `grads` its sub-group of the reduce-scatters. */
  constructor(
    gpu: Gpu,
    group: Communicator,
    grads: Communicator,
    compress?: Scheme,
    private readonly experts?: ExpertGroup,
  ) {
    this.dense = new ZeroGroup(gpu, group, grads, null, compress);
    this.expert = experts ? new ZeroGroup(gpu, experts.group, experts.grads, 1 / experts.dp, compress) : null;
  }

  /** `buckets` as ZeRO shards them: under ep each holds dense or expert parameters only ({@link expertRuns}). */
  split(buckets: Bucket[]): Bucket[] {
    return this.experts ? expertRuns(buckets, this.experts.isExpert) : buckets;
  }

  isExpert(b: Bucket): boolean {
    return !!this.experts?.isExpert(b.params[0].name);
  }

  /** The group bucket b is sharded over. */
  of(b: Bucket): ZeroGroup {
    return this.expert && this.isExpert(b) ? this.expert : this.dense;
  }

  /** The compressed reduce-scatters' error-feedback residuals (checkpoint state). */
  state(): Record<string, Tensor> {
    return { ...this.dense.state(), ...this.expert?.state() };
  }
}

/**
 * `buckets` cut into maximal runs of consecutive parameters on the same side of `isExpert` (each
 * run keeps the alignment padding after its last parameter), renumbered in order; a 'layer'
 * unit of a MoE block becomes its dense part and its experts, which shard over different groups.
 */
export function expertRuns(buckets: readonly Bucket[], isExpert: (name: string) => boolean): Bucket[] {
  const out: Bucket[] = [];
  for (const b of buckets) {
    let run: Bucket | null = null;
    for (const p of b.params) {
      if (run && isExpert(run.params[0].name) === isExpert(p.name)) run.params.push(p);
      else {
        if (run) run.end = p.offset;
        out.push(run = { index: out.length, start: p.offset, end: b.end, params: [p] });
      }
    }
  }
  return out;
}

/** What one local pipeline stage does with the units (buckets) of a ZeRO-2/3 step. */
export interface StageUnits {
  /** The units its backward reduce-scatters. */
  reduce: Bucket[];
  /** Stage 3: the resident units its forward and its backward gather. */
  forward: Set<number>;
  backward: Set<number>;
}

/**
 * Per local stage (`stages`, global indices), the units it reduces and gathers. An interleaved
 * rank runs several stages per micro-batch, each on its own tape, and a unit may be read by
 * several of them (the hybrid's shared block). Its gradient is final for the micro-batch
 * once the last of their backwards, the lowest stage's (backward runs from the last stage down),
 * is done, so that one reduces it; its values are gathered once per pass, by the first forward
 * (the lowest stage) and the first backward (the highest) that read it — the gathered values of a
 * resident unit stay in its working buffer between them, being fixed within a step. With one
 * stage per rank every unit is reduced and gathered by it.
 * @param using the local stages that read a parameter (stages.ts ModelStages.stagesUsing).
 */
export function stageUnits(
  buckets: readonly Bucket[],
  stages: readonly number[],
  using: (name: string) => number[],
): Map<number, StageUnits> {
  const out = new Map(stages.map((s) => [s, { reduce: [], forward: new Set(), backward: new Set() } as StageUnits]));
  for (const b of buckets) {
    const by = [...new Set(b.params.flatMap((p) => using(p.name)))].sort((x, y) => x - y);
    if (!by.length) by.push(stages[0]);
    out.get(by[0])!.reduce.push(b);
    out.get(by[0])!.forward.add(b.index);
    out.get(by.at(-1)!)!.backward.add(b.index);
  }
  return out;
}
