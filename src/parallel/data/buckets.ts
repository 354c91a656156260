/**
 * Gradient buckets and their overlap with backward, as PyTorch DDP's Reducer (Li et al.,
 * "PyTorch Distributed", arXiv 2006.15704 §3.2) and picotron's data_parallel.py bucket manager:
 * a bucket is a contiguous run of the ParamStore's flat gradient buffer (whole parameters,
 * alignment padding included), and its collective starts as soon as no remaining backward
 * node can add to any of its parameters.
 *
 * What overlaps in this runtime. Encoding backward is synchronous and GPU readback is async, so
 * "launched during backward" means: when the tape has encoded the last node that touches a
 * bucket, the bucket's readback is encoded and submitted at once (`gpu.read` flushes), and the
 * rest of backward is encoded behind it. The GPU then runs the remaining backward kernels while
 * the host receives the finished buckets and runs their collectives (message passing between
 * workers) one after another in launch order — the same single-stream ordering NCCL gives DDP.
 * Collectives never start before backward's encoding returns (JavaScript runs one task at a
 * time), so the host's encoding work itself is not overlapped.
 */
import type { Gpu } from '../../gpu/context.ts';
import { Tensor } from '../../gpu/tensor.ts';
import { Tape } from '../../autograd/tape.ts';
import { type Node } from '../../autograd/records.ts';
import type { RuleTable } from '../../autograd/records.ts';
import type { Param, ParamStore } from '../../nn/params.ts';

/** One bucket: flat-buffer elements [start, end) holding `params` whole. */
export interface Bucket {
  index: number;
  start: number;
  end: number;
  params: Param[];
}

/**
 * Splits the flat buffer into buckets of whole parameters, in declaration order.
 *
 * @param by a size in bytes: parameters are grouped from the end of the buffer (backward makes
 *   the last declared parameters final first, as DDP's reverse-order buckets) until a bucket
 *   reaches at least that many bytes; or `'layer'`: one bucket per layer (the parameters of
 *   one {@link layerOf} block share a bucket; any other parameter groups with neighbours of the same name
 *   without its last component, e.g. `transformer.ln_f.weight` and `.bias`) — ZeRO-3's units.
 * @throws Error when `by` is neither a positive number nor 'layer'.
 */
export function planBuckets(store: ParamStore, by: number | 'layer'): Bucket[] {
  const ps = store.params;
  const groups: Param[][] = [];
  if (by === 'layer') {
    const key = (n: string) => layerOf(n) ?? n.slice(0, n.lastIndexOf('.'));
    for (const p of ps) {
      const last = groups.at(-1);
      if (last && key(last[0].name) === key(p.name)) last.push(p);
      else groups.push([p]);
    }
  } else {
    if (!(typeof by === 'number' && by > 0)) {
      throw new Error(`planBuckets: bucket size must be a positive number of bytes or 'layer', got ${by}`);
    }
    let cur: Param[] = [];
    let bytes = 0;
    for (let i = ps.length - 1; i >= 0; i--) {
      cur.unshift(ps[i]);
      bytes += paddedSize(store, i) * 4;
      if (bytes >= by) {
        groups.unshift(cur);
        cur = [];
        bytes = 0;
      }
    }
    if (cur.length) groups.unshift(cur);
  }
  return groups.map((params, index) => {
    const lastIdx = ps.indexOf(params[params.length - 1]);
    return { index, start: params[0].offset, end: ps[lastIdx].offset + paddedSize(store, lastIdx), params };
  });
}

/**
 * The repeated block a parameter belongs to, as its name prefix (`transformer.h.3`, `blocks.0`,
 * `backbone.layers.2`), or null for one outside the stack (embeddings, final norm, a block
 * shared by several layers): the units ZeRO-3 gathers one at a time.
 */
export function layerOf(name: string): string | null {
  return name.match(/^((?:.*\.)?(?:h|blocks|layers)\.\d+)\./)?.[1] ?? null;
}

/** Elements parameter i occupies in the flat buffer, alignment padding included. */
function paddedSize(store: ParamStore, i: number): number {
  const ps = store.params;
  return (i + 1 < ps.length ? ps[i + 1].offset : store.flatSize) - ps[i].offset;
}

/** A view of flat buffer `flat` over elements [start, end) (start must be 256-byte aligned to be bound). */
export function sliceOf(flat: Tensor, start: number, end: number, label = ''): Tensor {
  return flat.range(start, end - start, label || `${flat.label}[${start}:${end}]`);
}

/** A tape that also keeps every node offered to it, so the last use of each parameter is known before backward. */
export class LoggingTape extends Tape {
  /** Every node offered to {@link record}, in forward order (also those the tape skips). */
  readonly log: Node[] = [];
  /** Logs the node, then records it as {@link Tape.record} does. */
  override record(node: Node, inputs: readonly (Tensor | null)[], outputs: readonly Tensor[]): void {
    this.log.push(node);
    super.record(node, inputs, outputs);
  }
}

/** Ids of the parameter value tensors a node's record mentions (those its rule accumulates into). */
function paramRefs(node: Node, isParam: Set<number>, alias: ReadonlyMap<number, number>): Set<number> {
  const ids = new Set<number>();
  for (const v of Object.values(node)) {
    // A recomputed segment lists what it reads (checkpoint.ts): its parameters accumulate in its rule.
    for (const t of Array.isArray(v) ? v : [v]) {
      if (!(t instanceof Tensor)) continue;
      const id = alias.get(t.id) ?? t.id;
      if (isParam.has(id)) ids.add(id);
    }
  }
  return ids;
}

/**
 * Which buckets each node of a logged tape touches and when each becomes final during backward
 * (no remaining node can add to it): DDP's "ready" bookkeeping, shared by data parallelism and
 * ZeRO. Built from the forward log before backward starts.
 */
export class BucketFinality {
  private readonly owner = new Map<number, number>();
  private readonly uses = new Map<number, number>();
  private readonly refs = new Map<Node, Set<number>>();
  /** Per bucket index: its parameters some logged node still has to use. */
  private readonly open = new Map<number, Set<number>>();

  /**
   * @param aliases views the model reads in place of a parameter's value (view → value; a
   *   tensor-parallel bias column, rank_context.ts), so a node that reads one touches the parameter.
   */
  constructor(buckets: readonly Bucket[], log: readonly Node[], aliases?: ReadonlyMap<Tensor, Tensor>) {
    buckets.forEach((b) => b.params.forEach((p) => this.owner.set(p.value.id, b.index)));
    const isParam = new Set(this.owner.keys());
    const alias = new Map([...aliases ?? []].map(([view, value]) => [view.id, value.id]));
    for (const node of log) {
      const r = paramRefs(node, isParam, alias);
      this.refs.set(node, r);
      for (const id of r) this.uses.set(id, (this.uses.get(id) ?? 0) + 1);
    }
    for (const b of buckets) {
      this.open.set(
        b.index,
        new Set(b.params.map((p) => p.value.id).filter((id) => this.uses.has(id))),
      );
    }
  }

  /** Buckets whose parameters `node` mentions (its rule may read their values and add to their gradients). */
  bucketsOf(node: Node): number[] {
    return [...new Set([...this.refs.get(node) ?? []].map((id) => this.owner.get(id)!))];
  }

  /** Marks `node`'s rule as done; returns the buckets it made final, in the order they became so. */
  done(node: Node): number[] {
    const final: number[] = [];
    for (const id of this.refs.get(node) ?? []) {
      const left = this.uses.get(id)! - 1;
      this.uses.set(id, left);
      if (left > 0) continue;
      const k = this.owner.get(id)!;
      const open = this.open.get(k)!;
      open.delete(id);
      if (open.size === 0) final.push(k);
    }
    return final;
  }
}

/** What one bucketed backward did, for tests and reports. */
export interface OverlapStats {
  /** Buckets whose readback was submitted before backward's encoding finished. */
  launchedDuringBackward: number;
  /** Bucket indices in launch order (the order of their collectives). */
  order: number[];
}

/** Hooks that let ZeRO-2/3 keep gradients (and values) per layer instead of in the flat buffers. */
export interface BucketHooks {
  /** Views read in place of parameter values (view → value), for BucketFinality. */
  aliases?: ReadonlyMap<Tensor, Tensor>;
  /** The tensor holding bucket b's gradients (default: elements [start, end) of `store.grads`). */
  gradsOf?(b: Bucket): Tensor;
  /** Awaited before each node's rule with the buckets it touches (ZeRO-3 gathers a layer here); makes backward asynchronous. */
  beforeNode?(node: Node, buckets: number[]): Promise<void>;
  /** Awaited before a bucket that backward never touched is read after backward (its gradient is zero). */
  beforeLateLaunch?(k: number): Promise<void>;
  /**
   * The tape already ran phase B (a zero-bubble schedule's, docs/design.md#zero-bubble-zb-h1): run
   * phase W, whose nodes finish the buckets (`beforeNode` awaited before each node's W work); B
   * itself finishes none and writes no parameter gradient (its parameter gradients are W's).
   */
  weightsOnly?: boolean;
}

/**
 * Runs the tape's backward and, for each of `buckets` (all of the store's, or a subset, by their
 * `index`) once its gradients are final, reads the
 * bucket back and calls `collective(bucket, host)`; the calls run one at a time in launch
 * order, which is the same on every rank because every rank encodes the same graph. Resolves
 * when every bucket's collective has finished.
 * A bucket whose parameters some logged node mentions but the tape skipped (no input needed a
 * gradient) never becomes final during backward; such buckets launch after it, last first.
 * @throws (rejects with) the first collective's error.
 */
export async function backwardWithBuckets(
  gpu: Gpu,
  store: ParamStore,
  buckets: readonly Bucket[],
  tape: LoggingTape,
  rules: RuleTable,
  collective: (b: Bucket, host: Float32Array) => Promise<void>,
  hooks: BucketHooks = {},
): Promise<OverlapStats> {
  const finality = new BucketFinality(buckets, tape.log, hooks.aliases);
  const gradsOf = hooks.gradsOf ?? ((b: Bucket) => sliceOf(store.grads, b.start, b.end));
  const launched = new Set<number>();
  const stats: OverlapStats = { launchedDuringBackward: 0, order: [] };
  let chain: Promise<void> = Promise.resolve();
  // `buckets` may be a subset of the store's (an interleaved chunk's units, zero_sync.ts): by index.
  const byIndex = new Map(buckets.map((b) => [b.index, b]));
  const launch = (k: number) => {
    launched.add(k);
    stats.order.push(k);
    const b = byIndex.get(k)!;
    const read = gpu.read(gradsOf(b)) as Promise<Float32Array>;
    read.catch(() => {});
    chain = chain.then(async () => collective(b, await read));
  };
  const onNodeDone = (node: Node) => {
    for (const k of finality.done(node)) {
      if (launched.has(k)) continue;
      launch(k);
      stats.launchedDuringBackward++;
    }
  };
  const before = hooks.beforeNode;
  if (hooks.weightsOnly) {
    if (before) await tape.backwardWeightsAsync(onNodeDone, (node) => before(node, finality.bucketsOf(node)));
    else tape.backwardWeights(onNodeDone);
  } else if (before) await tape.backwardAsync(rules, onNodeDone, (node) => before(node, finality.bucketsOf(node)));
  else if (tape.asynchronous) await tape.backwardAsync(rules, onNodeDone);
  else tape.backward(rules, onNodeDone);
  for (const { index: k } of [...buckets].reverse()) {
    if (launched.has(k)) continue;
    await hooks.beforeLateLaunch?.(k);
    launch(k);
  }
  await chain;
  return stats;
}
