/**
 * The data every panel draws from, in the shapes a live run and a headless run's files share:
 * trace spans (src/comm/trace.ts `Span`), step records (metrics.jsonl lines) and lanes of
 * compute / communication / idle segments per rank. Pure functions, so the live page and the
 * "Open run" loader feed the same charts and timeline.
 */
import { type ChromeTrace, type Span, type SpanKind, WALL_PID } from '../../comm/trace.ts';

/** One optimizer step as the charts need it (a metrics.jsonl train line). */
export interface StepRecord {
  step: number;
  loss: number;
  lr?: number;
  gradNorm?: number;
  /** Wall ms per step. */
  ms?: number;
  tokensPerSec?: number;
}

/** A validation loss at a step (a metrics.jsonl eval line). */
export interface ValRecord {
  step: number;
  valLoss: number;
}

/** What metrics.jsonl holds, split into train and eval lines. */
export interface Metrics {
  train: StepRecord[];
  val: ValRecord[];
}

const num = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) ? x : undefined);

/**
 * Parses a metrics.jsonl (one JSON object per line, as src/cli/train.ts writes: `{step, loss,
 * lr, grad_norm, ms_per_step, tokens_per_s}` and `{step, val_loss}`; camelCase keys accepted
 * too). Blank lines are skipped.
 * @throws Error naming the first line that is not JSON or has no numeric `step`.
 */
export function parseMetricsJsonl(text: string): Metrics {
  const out: Metrics = { train: [], val: [] };
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line);
    } catch {
      throw new Error(`metrics.jsonl line ${i + 1} is not JSON: ${line.slice(0, 60)}`);
    }
    const step = num(o.step);
    if (step === undefined) throw new Error(`metrics.jsonl line ${i + 1} has no numeric "step"`);
    const val = num(o.val_loss) ?? num(o.valLoss);
    if (val !== undefined) out.val.push({ step, valLoss: val });
    const loss = num(o.loss);
    if (loss !== undefined) {
      out.train.push({
        step, loss, lr: num(o.lr), gradNorm: num(o.grad_norm) ?? num(o.gradNorm),
        ms: num(o.ms_per_step) ?? num(o.ms), tokensPerSec: num(o.tokens_per_s) ?? num(o.tokensPerSec),
      });
    }
  });
  if (!out.train.length && !out.val.length) throw new Error('metrics.jsonl has no train or eval lines');
  return out;
}

const KINDS: readonly SpanKind[] = ['send', 'recv', 'collective', 'compute'];

/**
 * Spans back from a trace.json written by `toChromeTrace`: the wall-clock process's "X" events
 * (their args carry op, group, bytes, peer and the simulated times). Wall times are relative
 * to the trace start (ms); the original epoch is not stored in the file.
 * @throws Error when there is no traceEvents array or no wall-clock span in it.
 */
export function fromChromeTrace(json: unknown): Span[] {
  const ev = (json as ChromeTrace | null)?.traceEvents;
  if (!Array.isArray(ev)) throw new Error('trace.json has no traceEvents array (expected Chrome Trace Event JSON from toChromeTrace)');
  const spans: Span[] = [];
  for (const e of ev) {
    if (e?.ph !== 'X' || e.pid !== WALL_PID || !KINDS.includes(e.cat as SpanKind)) continue;
    const a = (e.args ?? {}) as Record<string, unknown>;
    const start = (e.ts ?? 0) / 1e3, end = start + (e.dur ?? 0) / 1e3;
    const s: Span = {
      rank: e.tid, kind: e.cat as SpanKind, op: String(a.op ?? e.name), group: String(a.group ?? ''),
      algorithm: String(a.algorithm ?? ''), bytes: num(a.bytes) ?? 0, peer: num(a.peer) ?? -1,
      start, end, simStart: num(a.simStartUs) ?? 0, simEnd: num(a.simEndUs) ?? 0,
    };
    if (num(a.simArrivalUs) !== undefined) s.simArrival = num(a.simArrivalUs);
    if (num(a.seq) !== undefined) s.seq = num(a.seq);
    spans.push(s);
  }
  if (!spans.length) throw new Error('trace.json holds no wall-clock spans (pid 0 "X" events with cat send/recv/collective/compute)');
  return spans;
}

/** Which clock a timeline shows: wall (ms) or the network model's simulated clock (µs). */
export type Clock = 'wall' | 'sim';

/** One drawn piece of a rank's lane. */
export interface Segment {
  kind: 'compute' | 'comm' | 'idle';
  start: number;
  end: number;
  /** The span drawn (absent for idle gaps). */
  span?: Span;
}

/** A rank's lane: busy/idle segments and the messages it sent or received. */
export interface Lane {
  rank: number;
  segments: Segment[];
  messages: Segment[];
}

const isP2p = (s: Span) => (s.kind === 'send' || s.kind === 'recv') && s.op === 'send';

/** Layers of a rank's lane, later ones drawn over earlier ones (see {@link buildLanes}). */
const LAYER = { compute: 1, comm: 2, wait: 3 } as const;

/**
 * Lanes of `spans` on `clock`, times relative to the earliest span (ms for wall, µs for sim).
 * Each instant of a rank's lane takes the top layer covering it: compute spans (the trainer
 * traces a whole step as one), then communication (collective calls and the transfer part of
 * point-to-point receives), then waits: a receive posted before its matching send departed
 * (FIFO per sender, receiver and group, as the transport delivers) is idle until the send —
 * so pipeline bubbles show as idle even inside a traced step. Instants no span covers are idle.
 */
export function buildLanes(spans: readonly Span[], clock: Clock): { lanes: Lane[]; end: number } {
  const t = (s: Span) => (clock === 'wall' ? [s.start, s.end] : [s.simStart, s.simEnd]) as [number, number];
  const t0 = spans.reduce((m, s) => Math.min(m, t(s)[0]), Infinity);
  const end = spans.reduce((m, s) => Math.max(m, t(s)[1] - t0), 0);
  const sorted = [...spans].sort((a, b) => t(a)[0] - t(b)[0]);
  const sendQueue = new Map<string, Span[]>();
  for (const s of sorted) {
    if (s.kind !== 'send' || !isP2p(s)) continue;
    const k = `${s.rank}>${s.peer}|${s.group}`;
    if (!sendQueue.has(k)) sendQueue.set(k, []);
    sendQueue.get(k)!.push(s);
  }
  const ranks = [...new Set(spans.map((s) => s.rank))].sort((a, b) => a - b);
  const lanes: Lane[] = ranks.map((rank) => ({ rank, segments: [], messages: [] }));
  const byRank = new Map(lanes.map((l) => [l.rank, l]));
  const layers = new Map<number, { a: number; b: number; layer: number; span: Span }[]>(ranks.map((r) => [r, []]));
  for (const s of sorted) {
    const [a, b] = t(s).map((x) => x - t0);
    const lane = byRank.get(s.rank)!, list = layers.get(s.rank)!;
    if (s.kind === 'send' || s.kind === 'recv') lane.messages.push({ kind: 'comm', start: a, end: Math.max(b, a), span: s });
    if (s.kind === 'compute') list.push({ a, b, layer: LAYER.compute, span: s });
    else if (s.kind === 'collective') list.push({ a, b, layer: LAYER.comm, span: s });
    else if (s.kind === 'recv' && isP2p(s)) {
      const send = sendQueue.get(`${s.peer}>${s.rank}|${s.group}`)?.shift();
      const from = Math.min(b, send ? Math.max(a, t(send)[0] - t0) : a);
      if (from > a) list.push({ a, b: from, layer: LAYER.wait, span: s });
      list.push({ a: from, b, layer: LAYER.comm, span: s });
    }
  }
  for (const lane of lanes) lane.segments = sweep(layers.get(lane.rank)!, end);
  return { lanes, end };
}

/** Flattens overlapping layered intervals into segments covering [0, end] (top layer wins). */
function sweep(items: { a: number; b: number; layer: number; span: Span }[], end: number): Segment[] {
  const ev: { t: number; open: boolean; i: number }[] = [];
  items.forEach((x, i) => {
    if (x.b > x.a) ev.push({ t: x.a, open: true, i }, { t: x.b, open: false, i });
  });
  ev.sort((p, q) => p.t - q.t || Number(p.open) - Number(q.open));
  const active = [new Set<number>(), new Set<number>(), new Set<number>(), new Set<number>()];
  const out: Segment[] = [];
  const emit = (a: number, b: number) => {
    if (b <= a) return;
    let top = 3;
    while (top > 0 && !active[top].size) top--;
    const span = top ? items[[...active[top]].pop()!].span : undefined;
    const kind: Segment['kind'] = top === LAYER.compute ? 'compute' : top === LAYER.comm ? 'comm' : 'idle';
    const last = out[out.length - 1];
    if (last && last.kind === kind && last.span === span && last.end >= a) last.end = b;
    else out.push(kind === 'idle' && top === 0 ? { kind, start: a, end: b } : { kind, start: a, end: b, span });
  };
  let cursor = 0;
  for (const e of ev) {
    emit(cursor, e.t);
    cursor = Math.max(cursor, e.t);
    const x = items[e.i];
    if (e.open) active[x.layer].add(e.i);
    else active[x.layer].delete(e.i);
  }
  emit(cursor, end);
  return out;
}

/** Share of rank-time spent idle (0 when nothing was traced). */
export function idleShare(lanes: readonly Lane[], end: number): number {
  if (!lanes.length || end <= 0) return 0;
  const idle = lanes.flatMap((l) => l.segments).filter((g) => g.kind === 'idle').reduce((a, g) => a + g.end - g.start, 0);
  return idle / (lanes.length * end);
}

/** Time of each segment kind in a lane within [a, b] (the clock's unit). */
export function laneTotals(lane: Lane, a: number, b: number): Record<Segment['kind'], number> {
  const out = { compute: 0, comm: 0, idle: 0 };
  for (const g of lane.segments) out[g.kind] += Math.max(0, Math.min(b, g.end) - Math.max(a, g.start));
  return out;
}

/** "1.5 KiB"-style byte counts. */
export function fmtBytes(b: number): string {
  if (b < 1024) return `${b} B`;
  const u = ['KiB', 'MiB', 'GiB'];
  let x = b / 1024, i = 0;
  while (x >= 1024 && i < u.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x >= 100 ? x.toFixed(0) : x.toFixed(1)} ${u[i]}`;
}
