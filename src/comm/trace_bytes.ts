/**
 * Byte accounting read back from a trace (docs/design.md#the-correctness-contract-of-a-parallel-plan: the bytes each
 * run's trace records per step equal the analytical formula, exactly, counted in elements): the elements and bytes
 * every rank sent, per optimizer step and per `group/op` — the key src/parallel/ traffic.ts's TrafficMeter uses, so a
 * trace and a meter can be compared key by key, and src/parallel/run/run.ts `dimOfKey` maps either onto cost.ts's
 * `dim/collective` rows.
 *
 * Input is the Chrome Trace Event object trace.ts `toChromeTrace` writes (trace.json of a
 * parallel run). Only the wall-clock process's `send` events are counted (each span is written
 * once per timeline; counting both would double it). A send belongs to the step in its
 * `args.step` (stamped by the Tracer while a step span is open); traces written before that
 * field existed fall back to wall-time containment in the rank's `step N` compute span.
 * Runtime-neutral: no Deno APIs.
 */
import { BYTES_PER_ELEMENT, type ChromeTrace, stepOfSpanName, type TraceEvent, WALL_PID } from './trace.ts';

/** What one rank sent under one key in one step. */
export interface SendCount {
  /** Elements (bytes / {@link BYTES_PER_ELEMENT}). */
  elements: number;
  bytes: number;
  /** Messages (send events). */
  messages: number;
}

/** Everything one rank sent in one step. */
export interface StepSends {
  /** World rank (the event's tid). */
  rank: number;
  /** Optimizer step; null for sends outside every step (set-up such as weight broadcasts). */
  step: number | null;
  /** Keyed `group/op`, e.g. `dp[0,1]/allReduce` or `pp[0,1]:p2p/send`. */
  sent: Record<string, SendCount>;
}

const isCount = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0;

/** Wall-clock `step N` spans of one rank: [step, ts, end]. */
type StepWindow = [number, number, number];

/** The step whose window holds `ts`, innermost (latest start) first; null when none. */
function containing(windows: StepWindow[] | undefined, ts: number): number | null {
  let best: StepWindow | null = null;
  for (const w of windows ?? []) if (w[1] <= ts && ts <= w[2] && (!best || w[1] > best[1])) best = w;
  return best ? best[0] : null;
}

/**
 * Elements and bytes sent per rank, step and `group/op`, as the trace's send spans record them.
 * Rows are sorted by rank, then step (null first); a rank that sent nothing has no row.
 * @param trace the parsed trace.json (a {@link ChromeTrace}).
 * @throws Error when `trace` has no traceEvents array, or a wall-clock send event has no
 * string op/group, a byte count that is not a non-negative multiple of
 * {@link BYTES_PER_ELEMENT}, an `elements` that disagrees with its bytes, a `step` that is not
 * a non-negative integer, or a tid that is not a rank — the message names the event index.
 */
export function traceSends(trace: unknown): StepSends[] {
  const ev = (trace as ChromeTrace | null)?.traceEvents;
  if (!Array.isArray(ev)) {
    throw new Error(
      'traceSends: no traceEvents array (expected the Chrome Trace Event JSON of trace.ts toChromeTrace)',
    );
  }
  const wall = (e: TraceEvent | null) => e?.ph === 'X' && e.pid === WALL_PID;
  const windows = new Map<number, StepWindow[]>();
  for (const e of ev as (TraceEvent | null)[]) {
    if (!wall(e) || e!.cat !== 'compute') continue;
    const step = stepOfSpanName(e!.name);
    if (step === undefined || !Number.isFinite(e!.ts) || !Number.isFinite(e!.dur)) continue;
    if (!windows.has(e!.tid)) windows.set(e!.tid, []);
    windows.get(e!.tid)!.push([step, e!.ts!, e!.ts! + e!.dur!]);
  }
  const rows = new Map<string, StepSends>();
  (ev as (TraceEvent | null)[]).forEach((e, i) => {
    if (!wall(e) || e!.cat !== 'send') return;
    const a = (e!.args ?? {}) as Record<string, unknown>, where = `traceSends: send event ${i} (rank ${e!.tid})`;
    if (!isCount(e!.tid)) throw new Error(`${where}: tid is not a rank (a non-negative integer)`);
    if (typeof a.op !== 'string' || typeof a.group !== 'string') {
      throw new Error(`${where}: args.op and args.group must be strings`);
    }
    if (!isCount(a.bytes) || a.bytes % BYTES_PER_ELEMENT) {
      throw new Error(`${where}: args.bytes ${a.bytes} is not a non-negative multiple of ${BYTES_PER_ELEMENT}`);
    }
    const elements = a.bytes / BYTES_PER_ELEMENT;
    if (a.elements !== undefined && a.elements !== elements) {
      throw new Error(
        `${where}: args.elements ${a.elements} disagrees with args.bytes ${a.bytes} (${elements} elements)`,
      );
    }
    if (a.step !== undefined && !isCount(a.step)) {
      throw new Error(`${where}: args.step ${a.step} is not a non-negative integer`);
    }
    const step = a.step !== undefined ? a.step as number : containing(windows.get(e!.tid), e!.ts ?? NaN);
    const rk = `${e!.tid}|${step}`;
    if (!rows.has(rk)) rows.set(rk, { rank: e!.tid, step, sent: {} });
    const sent = rows.get(rk)!.sent, key = `${a.group}/${a.op}`;
    const c = sent[key] ?? (sent[key] = { elements: 0, bytes: 0, messages: 0 });
    c.elements += elements;
    c.bytes += a.bytes;
    c.messages++;
  });
  return [...rows.values()].sort((x, y) => x.rank - y.rank || (x.step ?? -1) - (y.step ?? -1));
}

/**
 * Elements `rank` sent in `step` per `group/op` (the shape of traffic.ts `Sent`); {} when the
 * trace holds no send of that rank and step.
 * @param rows the output of {@link traceSends}.
 */
export function sentElements(rows: readonly StepSends[], rank: number, step: number | null): Record<string, number> {
  const row = rows.find((r) => r.rank === rank && r.step === step);
  return Object.fromEntries(Object.entries(row?.sent ?? {}).map(([k, c]) => [k, c.elements]));
}

/**
 * Whether a `group/op` key is validation traffic: a group with an `eval` part (ZeRO-3's gathers,
 * mesh_eval.ts's forward passes), which runs between steps, outside a step's accounting.
 */
export function isValidationKey(key: string): boolean {
  return /(^|\/)eval[/:]/.test(key);
}
