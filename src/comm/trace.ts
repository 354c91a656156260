/**
 * Tracing of the collective layer (docs/design.md#the-network-model-the-simulated-clock-and-collective-costs and
 * docs/design.md#run-outputs): every send, receive, collective call and traced compute step of a rank is a {@link Span}
 * on two timelines, the wall clock (epoch ms, comparable across workers) and the simulated clock of the network model
 * (µs, see network.ts). Spans export to the Chrome Trace Event format (the JSON Perfetto and chrome://tracing open: "X"
 * complete events, ts/dur in µs) with one process per timeline and one thread per rank, and sum up to per-run byte
 * totals per rank pair and per op.
 */
import type { SimClock } from './network.ts';

/** What a span stands for. */
export type SpanKind = 'send' | 'recv' | 'collective' | 'compute';

/** One traced event of one rank. */
export interface Span {
  /** World rank that recorded it. */
  rank: number;
  kind: SpanKind;
  /** `allReduce`, `send`, … for messages the op of the call they belong to; compute: its name. */
  op: string;
  /** Group id (`world`, `tp[0,1]`, …); '' for compute. */
  group: string;
  /** Algorithm of the call ('' for point-to-point and compute). */
  algorithm: string;
  /** Payload bytes (messages) or bytes of the caller's buffer (collectives). */
  bytes: number;
  /** World rank at the other end of a message; −1 otherwise. */
  peer: number;
  /** Wall clock, ms since the epoch (performance.timeOrigin + performance.now()). */
  start: number;
  end: number;
  /** Simulated clock, µs. A send is an instant at departure; its `simArrival` is the arrival. */
  simStart: number;
  simEnd: number;
  /** Sends: simulated arrival at the peer, µs. */
  simArrival?: number;
  /** Per-group sequence number of the call (messages and collectives). */
  seq?: number;
  /**
   * Optimizer step the span belongs to: the step of the innermost open step span on this rank
   * (see {@link Tracer.span}); absent outside any step (set-up, evaluation between runs).
   */
  step?: number;
}

/** Bytes of one element on the wire: every dtype the transport carries (f32, i32) has 4. */
export const BYTES_PER_ELEMENT = 4;

/**
 * The step a compute span named `step N` stands for (the name src/parallel/run/run.ts gives each step); else
 * undefined.
 */
export function stepOfSpanName(name: string): number | undefined {
  const m = /^step (\d+)$/.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** Wall clock in epoch ms; performance.now() alone differs per worker (own time origin). */
export function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

/** The algorithm named by a call's detail string (`sum/ring` → `ring`; '' when none). */
export function algorithmOf(detail: string): string {
  const last = detail.split('/').pop() ?? '';
  return /^(ring|recursive-doubling|rabenseifner|binomial|direct)$/.test(last) ? last : '';
}

/**
 * Per-rank span recorder over the rank's {@link SimClock}. Disabled: records nothing. Keeps at
 * most `maxSpans` spans (a long run must not grow without bound); later ones are counted in
 * `dropped`. While a step span is open (see {@link span}) every span recorded is stamped with
 * its step, so a trace attributes each message to the optimizer step that sent it
 * (trace_bytes.ts reads that back).
 */
export class Tracer {
  readonly spans: Span[] = [];
  /** Spans not kept because `maxSpans` was reached. */
  dropped = 0;
  maxSpans = 500_000;

  /** Steps of the open step spans, innermost last (a stack: one rank runs its steps one at a time). */
  private readonly openSteps: number[] = [];

  constructor(readonly rank: number, readonly clock: SimClock, public enabled = true) {}

  /** The step of the innermost open step span, or undefined outside every step. */
  get step(): number | undefined {
    return this.openSteps[this.openSteps.length - 1];
  }

  /** Appends a span (stamped with this rank, and with the open step unless `s.step` is given) when enabled. */
  record(s: Omit<Span, 'rank'>): void {
    if (!this.enabled) return;
    if (this.spans.length >= this.maxSpans) this.dropped++;
    else {
      const step = s.step ?? this.step;
      this.spans.push(step === undefined ? { rank: this.rank, ...s } : { rank: this.rank, ...s, step });
    }
  }

  /**
   * Runs `fn` as a compute step named `name` (e.g. a GPU forward pass, awaited to completion
   * by the caller's `fn`): records a `compute` span and advances the simulated clock by the
   * measured wall time, or by `opts.flops` over the network model's `peakGflops` when both are
   * set. `opts.sim: false` leaves the simulated clock alone (for work that only exists because
   * ranks are simulated, such as GPU read-back before an exchange). Returns what `fn` returns;
   * a throw still records the span.
   *
   * A step span — `opts.step` given, or a name `step N` ({@link stepOfSpanName}, what
   * src/parallel/run/run.ts uses) — stamps its step on every span recorded until it ends, itself
   * included. Only one step per rank may be open at a time besides nesting; concurrent
   * unrelated spans of one rank would otherwise be attributed to it.
   */
  async span<T>(
    name: string,
    fn: () => T | Promise<T>,
    opts: { flops?: number; bytes?: number; sim?: boolean; step?: number } = {},
  ): Promise<T> {
    const start = wallMs(), simStart = this.clock.now;
    const step = opts.step ?? stepOfSpanName(name);
    if (step !== undefined) this.openSteps.push(step);
    try {
      return await fn();
    } finally {
      const end = wallMs();
      if (opts.sim !== false) this.clock.compute((end - start) * 1e3, opts.flops);
      const span: Omit<Span, 'rank'> = {
        kind: 'compute',
        op: name,
        group: '',
        algorithm: '',
        bytes: opts.bytes ?? 0,
        peer: -1,
        start,
        end,
        simStart,
        simEnd: this.clock.now,
      };
      this.record(step === undefined ? span : { ...span, step });
      if (step !== undefined) this.openSteps.splice(this.openSteps.lastIndexOf(step), 1);
    }
  }

  /** Drops recorded spans (open steps and the clock are left alone: spans in flight still end). */
  clear(): void {
    this.spans.length = 0;
    this.dropped = 0;
  }
}

/** Per-run byte totals from the `send` spans. */
export interface TraceTotals {
  /** Bytes sent from world rank a to b, keyed `a>b`. */
  bytesByPair: Record<string, number>;
  /** Bytes sent per call op (`allReduce`, `send`, …). */
  bytesByOp: Record<string, number>;
  /** Messages sent per call op. */
  messagesByOp: Record<string, number>;
  /** Bytes sent per world rank. */
  bytesByRank: Record<number, number>;
  totalBytes: number;
}

/** Sums the sends of `spans` (any ranks). */
export function traceTotals(spans: readonly Span[]): TraceTotals {
  const t: TraceTotals = { bytesByPair: {}, bytesByOp: {}, messagesByOp: {}, bytesByRank: {}, totalBytes: 0 };
  for (const s of spans) {
    if (s.kind !== 'send') continue;
    const k = `${s.rank}>${s.peer}`;
    t.bytesByPair[k] = (t.bytesByPair[k] ?? 0) + s.bytes;
    t.bytesByOp[s.op] = (t.bytesByOp[s.op] ?? 0) + s.bytes;
    t.messagesByOp[s.op] = (t.messagesByOp[s.op] ?? 0) + 1;
    t.bytesByRank[s.rank] = (t.bytesByRank[s.rank] ?? 0) + s.bytes;
    t.totalBytes += s.bytes;
  }
  return t;
}

/** One Chrome Trace Event (the subset this module writes). */
export interface TraceEvent {
  name: string;
  cat?: string;
  ph: 'X' | 'M';
  ts?: number;
  dur?: number;
  pid: number;
  tid: number;
  args?: Record<string, unknown>;
}

/** The JSON object format of the Chrome Trace Event spec. */
export interface ChromeTrace {
  traceEvents: TraceEvent[];
  displayTimeUnit: 'ms' | 'ns';
  otherData?: Record<string, unknown>;
}

/** Process ids of the two timelines. */
export const WALL_PID = 0, SIM_PID = 1;

function eventName(s: Span): string {
  if (s.kind === 'send') return `send ${s.op} →${s.peer}`;
  if (s.kind === 'recv') return `recv ${s.op} ←${s.peer}`;
  return s.kind === 'collective' && s.algorithm ? `${s.op} (${s.algorithm})` : s.op;
}

/**
 * Chrome Trace Event JSON of the merged spans of a run (any ranks, any order): process
 * {@link WALL_PID} holds the wall-clock timeline (µs since the earliest span), process
 * {@link SIM_PID} the simulated one; thread id = world rank; every span an "X" event whose args
 * carry op, group, algorithm, bytes, peer and the other timeline's times, messages also their
 * `elements` (bytes / {@link BYTES_PER_ELEMENT}), and `seq` and `step` where the span has them.
 * `otherData` receives `meta` and the {@link traceTotals}.
 */
export function toChromeTrace(spans: readonly Span[], meta: Record<string, unknown> = {}): ChromeTrace {
  const sorted = [...spans].sort((a, b) => a.rank - b.rank || a.start - b.start || b.end - a.end);
  const t0 = sorted.reduce((m, s) => Math.min(m, s.start), Infinity);
  const ranks = [...new Set(sorted.map((s) => s.rank))].sort((a, b) => a - b);
  const ev: TraceEvent[] = [
    { name: 'process_name', ph: 'M', pid: WALL_PID, tid: 0, args: { name: 'wall clock' } },
    { name: 'process_name', ph: 'M', pid: SIM_PID, tid: 0, args: { name: 'simulated clock (network model)' } },
  ];
  for (const pid of [WALL_PID, SIM_PID]) {
    for (const r of ranks) ev.push({ name: 'thread_name', ph: 'M', pid, tid: r, args: { name: `rank ${r}` } });
  }
  for (const s of sorted) {
    const args: Record<string, unknown> = {
      op: s.op,
      group: s.group,
      algorithm: s.algorithm,
      bytes: s.bytes,
      peer: s.peer,
    };
    if (s.kind === 'send' || s.kind === 'recv') args.elements = s.bytes / BYTES_PER_ELEMENT;
    if (s.seq !== undefined) args.seq = s.seq;
    if (s.step !== undefined) args.step = s.step;
    if (s.simArrival !== undefined) args.simArrivalUs = s.simArrival;
    const name = eventName(s);
    ev.push({
      name,
      cat: s.kind,
      ph: 'X',
      pid: WALL_PID,
      tid: s.rank,
      ts: (s.start - t0) * 1e3,
      dur: (s.end - s.start) * 1e3,
      args: { ...args, simStartUs: s.simStart, simEndUs: s.simEnd },
    });
    ev.push({
      name,
      cat: s.kind,
      ph: 'X',
      pid: SIM_PID,
      tid: s.rank,
      ts: s.simStart,
      dur: s.simEnd - s.simStart,
      args: { ...args, wallMs: s.end - s.start },
    });
  }
  return { traceEvents: ev, displayTimeUnit: 'ms', otherData: { ...meta, totals: traceTotals(spans) } };
}

/**
 * Checks that `json` has the structure Perfetto needs: a `traceEvents` array of objects with
 * string `name` and `ph`, integer `pid`/`tid`, and for "X" events finite `ts` and `dur` ≥ 0.
 * Returns the problems found ([] when valid).
 */
export function validateChromeTrace(json: unknown): string[] {
  const errs: string[] = [];
  const ev = (json as ChromeTrace | null)?.traceEvents;
  if (!Array.isArray(ev)) return ['traceEvents is not an array'];
  ev.forEach((e, i) => {
    if (errs.length > 20) return;
    if (typeof e !== 'object' || e === null) return errs.push(`event ${i} is not an object`);
    if (typeof e.name !== 'string') errs.push(`event ${i}: name is not a string`);
    if (e.ph !== 'X' && e.ph !== 'M') errs.push(`event ${i}: ph '${e.ph}' is not X or M`);
    if (!Number.isInteger(e.pid) || !Number.isInteger(e.tid)) errs.push(`event ${i}: pid/tid are not integers`);
    if (e.ph === 'X' && !(Number.isFinite(e.ts) && Number.isFinite(e.dur) && (e.dur as number) >= 0)) {
      errs.push(`event ${i}: X event needs finite ts and dur ≥ 0 (ts ${e.ts}, dur ${e.dur})`);
    }
  });
  return errs;
}
