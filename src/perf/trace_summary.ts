/**
 * Communication characterisation of a run from its trace.json
 * (docs/design.md#the-correctness-contract-of-a-parallel-plan; after the measured-log studies of transformer training,
 * which find small point-to-point messages matter most): every message a rank sent inside a training step, binned by
 * size, per collective and per parallel dimension — count, bytes, and time on the simulated clock (α + bytes/β of the
 * run's --net, the time the network model charges it) — the share of that time spent in messages under 64 KiB, and the
 * bytes each rank sent per step by `dim/collective`, for comparison with the formulas (accounting.json's predictions).
 * Validation traffic between steps is left out. Runtime-neutral: no Deno APIs.
 */
import { type ChromeTrace, type TraceEvent, WALL_PID } from '../comm/trace.ts';
import { dimOfKey } from '../parallel/cost/rank_traffic.ts';

/** Upper edges of the size bins in bytes (the last bin holds everything larger): 1 KiB … 4 MiB by 4×. */
export const SIZE_EDGES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22] as const;
/** What counts as a small message: under 64 KiB. */
export const SMALL_BYTES = 1 << 16;

/** Messages of one collective or dimension, per size bin (SIZE_EDGES.length + 1 bins). */
export interface SizeHistogram {
  count: number[];
  bytes: number[];
  /** Simulated µs the messages took (0 where the run had no --net). */
  simUs: number[];
}

/** A trace's characterisation (see the module doc). */
export interface TraceSummary {
  /** Steps seen (distinct `args.step` values). */
  steps: number;
  byCollective: Map<string, SizeHistogram>;
  byDim: Map<string, SizeHistogram>;
  /** Share of messages, bytes and simulated time in messages under {@link SMALL_BYTES}; time NaN without a network model. */
  small: { count: number; bytes: number; time: number };
  /** Bytes per step of each rank by `dim/collective`, averaged over the steps. */
  bytesPerStep: Map<number, Record<string, number>>;
}

/** The bin of a message of `bytes`. */
export function sizeBin(bytes: number): number {
  const i = SIZE_EDGES.findIndex((e) => bytes < e);
  return i < 0 ? SIZE_EDGES.length : i;
}

const empty = (): SizeHistogram => {
  const z = () => new Array(SIZE_EDGES.length + 1).fill(0);
  return { count: z(), bytes: z(), simUs: z() };
};

/**
 * Characterises the wall-clock send events of `trace` that carry a step (see the module doc).
 * @throws Error when `trace` has no traceEvents array or a send lacks its byte count or group.
 */
export function summarizeTrace(trace: unknown): TraceSummary {
  const ev = (trace as ChromeTrace | null)?.traceEvents;
  if (!Array.isArray(ev)) throw new Error("trace summary: no traceEvents array (expected a run's trace.json)");
  const byCollective = new Map<string, SizeHistogram>(), byDim = new Map<string, SizeHistogram>();
  const perRank = new Map<number, Record<string, number>>(), steps = new Set<number>();
  const add = (m: Map<string, SizeHistogram>, k: string, bin: number, bytes: number, us: number) => {
    const h = m.get(k) ?? m.set(k, empty()).get(k)!;
    h.count[bin]++;
    h.bytes[bin] += bytes;
    h.simUs[bin] += us;
  };
  (ev as TraceEvent[]).forEach((e, i) => {
    if (e?.ph !== 'X' || e.pid !== WALL_PID || e.cat !== 'send' || e.args?.step === undefined) return;
    const a = e.args as Record<string, unknown>;
    if (typeof a.bytes !== 'number' || typeof a.group !== 'string' || typeof a.op !== 'string') {
      throw new Error(`trace summary: send event ${i} has no bytes, group or op`);
    }
    const us = typeof a.simArrivalUs === 'number' && typeof a.simStartUs === 'number'
      ? a.simArrivalUs - a.simStartUs
      : 0;
    const key = `${a.group}/${a.op}`, dim = dimOfKey(key), bin = sizeBin(a.bytes);
    steps.add(a.step as number);
    add(byCollective, a.op, bin, a.bytes, us);
    add(byDim, dim, bin, a.bytes, us);
    const r = perRank.get(e.tid) ?? perRank.set(e.tid, {}).get(e.tid)!, k = `${dim}/${a.op}`;
    r[k] = (r[k] ?? 0) + a.bytes;
  });
  const n = Math.max(1, steps.size);
  for (const r of perRank.values()) for (const k of Object.keys(r)) r[k] /= n;
  const total = (f: keyof SizeHistogram, small: boolean) =>
    [...byDim.values()].reduce(
      (s, h) => s + h[f].reduce((a, v, b) => a + (!small || SIZE_EDGES[b] <= SMALL_BYTES ? v : 0), 0),
      0,
    );
  const share = (f: keyof SizeHistogram) => total(f, true) / total(f, false);
  return {
    steps: steps.size,
    byCollective,
    byDim,
    small: { count: share('count'), bytes: share('bytes'), time: share('simUs') },
    bytesPerStep: perRank,
  };
}

/** A bin's label: `< 1 KiB`, `1–4 KiB`, …, `≥ 4 MiB`. */
export function binLabel(b: number): string {
  const fmt = (x: number) => (x >= 1 << 20 ? `${x / (1 << 20)} MiB` : `${x / 1024} KiB`);
  if (b === 0) return `< ${fmt(SIZE_EDGES[0])}`;
  if (b === SIZE_EDGES.length) return `≥ ${fmt(SIZE_EDGES[b - 1])}`;
  return `${fmt(SIZE_EDGES[b - 1])}–${fmt(SIZE_EDGES[b])}`;
}
