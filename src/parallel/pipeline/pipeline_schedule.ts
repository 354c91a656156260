/**
 * Pipeline-parallel schedules written as data (docs/design.md#pipeline-schedules-and-the-bubble): for p ranks, v
 * virtual stages per rank (S = p·v stages) and m micro-batches, one list of {@link PipeAction}s per rank.
 *
 * Layout: stage s lives on rank s mod p, so rank r holds stages r, r+p, …, r+(v−1)p
 * (Megatron's interleaved layout; v = 1 is the plain pipeline where stage = rank).
 *
 * Every action names the *local* stage it serves on its own rank:
 * - `forward` / `backward` (micro, stage): compute of that stage for that micro-batch; in a split
 *   schedule (zero_bubble.ts) `backward` is phase B (input gradients) and `weight` phase W
 *   (parameter gradients), docs/design.md#split-backward-b-and-w;
 * - `send-act` (micro, s) ships stage s's output to rank(s+1); it is matched by
 *   `recv-act` (micro, s+1) there (the input of stage s+1);
 * - `send-grad` (micro, s) ships the gradient of stage s's input to rank(s−1); it is matched
 *   by `recv-grad` (micro, s−1) there (the output gradient of stage s−1);
 * - `peer` is the pipeline rank (index in the pp group) at the other end; hand-offs between two
 *   stages of one rank (p = 1, v > 1) need no message.
 *
 * Execution semantics that {@link checkSchedule} proves deadlock-free by simulation:
 * - `buffered` (our Communicator: a send resolves at once, a receive waits): actions in order;
 * - `rendezvous` (a send completes only once its receive is posted): every maximal run of
 *   consecutive communication actions is posted together and waited on as one batch, as
 *   torch.distributed.batch_isend_irecv in Megatron's p2p_communication.py.
 * Generators put a batch's sends before its receives so both readings hold.
 *
 * Schedules: GPipe (Huang et al., arXiv 1811.06965; PyTorch's ScheduleGPipe order), 1F1B /
 * PipeDream-Flush and interleaved 1F1B (Narayanan et al., arXiv 2104.04473; Megatron-LM
 * schedules.py's warm-up counts and virtual micro-batch order); pipeline_sim.ts runs them on a
 * simulated clock (the deadlock check, the predicted timeline).
 */
import { isComm, messageKey, simulate } from './pipeline_sim.ts';
import { zbH1 } from './zero_bubble.ts';
export { checkSchedule, scheduleProblems } from './schedule_check.ts';

export type ActionKind = 'forward' | 'backward' | 'weight' | 'send-act' | 'recv-act' | 'send-grad' | 'recv-grad';
export type ScheduleKind = 'gpipe' | '1f1b' | 'interleaved' | 'zb-h1';
export const SCHEDULE_KINDS: readonly ScheduleKind[] = ['gpipe', '1f1b', 'interleaved', 'zb-h1'];

/** One step of one rank's program. `peer` is set exactly on communication actions. */
export interface PipeAction {
  kind: ActionKind;
  micro: number;
  stage: number;
  peer?: number;
}

/** p ranks × v virtual stages each, m micro-batches; `ranks[r]` is rank r's program. */
export interface PipelineSchedule {
  kind: ScheduleKind;
  p: number;
  m: number;
  v: number;
  ranks: PipeAction[][];
}

/** Pipeline rank that runs `stage` (stages are dealt round-robin: rank r holds r, r+p, …). */
export const rankOfStage = (stage: number, p: number) => stage % p;
/** @throws Error naming p, m or v when one is not a positive integer. */
export function checkShape(p: number, m: number, v: number): void {
  const bad = ([['p', p], ['m', m], ['v', v]] as const).filter(([, x]) => !Number.isInteger(x) || x < 1);
  if (bad.length) {
    throw new Error(`pipeline schedule: ${bad.map(([n, x]) => `${n} = ${x}`).join(', ')} must be positive integers`);
  }
}

/** A compute action (no peer): what generators list before {@link withComm} adds the messages. */
export type Compute = { kind: 'forward' | 'backward' | 'weight'; micro: number; stage: number };

/** Adds the messages around each compute: receive just before, send just after (W sends nothing). */
export function withComm(kind: ScheduleKind, p: number, m: number, v: number, compute: Compute[][]): PipelineSchedule {
  const S = p * v;
  const ranks = compute.map((list, r) => {
    const out: PipeAction[] = [];
    for (const c of list) {
      const prev = c.stage - 1, next = c.stage + 1;
      const remote = (s: number) => s >= 0 && s < S && rankOfStage(s, p) !== r;
      if (c.kind === 'weight') out.push(c);
      else if (c.kind === 'forward') {
        if (remote(prev)) out.push({ kind: 'recv-act', micro: c.micro, stage: c.stage, peer: rankOfStage(prev, p) });
        out.push(c);
        if (remote(next)) out.push({ kind: 'send-act', micro: c.micro, stage: c.stage, peer: rankOfStage(next, p) });
      } else {
        if (remote(next)) out.push({ kind: 'recv-grad', micro: c.micro, stage: c.stage, peer: rankOfStage(next, p) });
        out.push(c);
        if (remote(prev)) out.push({ kind: 'send-grad', micro: c.micro, stage: c.stage, peer: rankOfStage(prev, p) });
      }
    }
    // Within each run of messages, sends go first (see the module doc).
    for (let i = 0; i < out.length;) {
      let j = i;
      while (j < out.length && isComm(out[j].kind)) j++;
      if (j > i) {
        out.splice(
          i,
          j - i,
          ...out.slice(i, j).sort((a, b) => Number(a.kind.startsWith('recv')) - Number(b.kind.startsWith('recv'))),
        );
      }
      i = j + 1;
    }
    return out;
  });
  return { kind, p, m, v, ranks };
}

const F = (micro: number, stage: number): Compute => ({ kind: 'forward', micro, stage });
const B = (micro: number, stage: number): Compute => ({ kind: 'backward', micro, stage });
const range = (n: number) => [...Array(n).keys()];

/** GPipe: every forward, then every backward (micro-batch order 0…m−1). @throws on p, m < 1. */
export function gpipe(p: number, m: number): PipelineSchedule {
  checkShape(p, m, 1);
  return withComm(
    'gpipe',
    p,
    m,
    1,
    range(p).map((r) => [...range(m).map((i) => F(i, r)), ...range(m).map((i) => B(i, r))]),
  );
}

/** 1F1B (PipeDream-Flush): min(p−r−1, m) warm-up forwards, alternate F/B, drain backwards. @throws on p, m < 1. */
export function oneFOneB(p: number, m: number): PipelineSchedule {
  checkShape(p, m, 1);
  return withComm(
    '1f1b',
    p,
    m,
    1,
    range(p).map((r) => {
      const warm = Math.min(p - r - 1, m), list: Compute[] = range(warm).map((i) => F(i, r));
      for (let i = 0; i < m - warm; i++) list.push(F(warm + i, r), B(i, r));
      for (let i = m - warm; i < m; i++) list.push(B(i, r));
      return list;
    }),
  );
}

/**
 * Interleaved 1F1B with v model chunks per rank (Megatron-LM's
 * forward_backward_pipelining_with_interleaving): virtual micro-batch k runs chunk ⌊k/p⌋ mod v
 * of micro-batch ⌊k/(p·v)⌋·p + k mod p; backwards walk chunks in reverse; rank r warms up with
 * min(2(p−r−1) + (v−1)p, m·v) forwards. @throws when m is not a multiple of p (Megatron's rule).
 */
export function interleaved(p: number, m: number, v: number): PipelineSchedule {
  checkShape(p, m, v);
  if (m % p) throw new Error(`interleaved 1F1B: micro-batches ${m} must be a multiple of pp ${p}`);
  const micro = (k: number) => Math.floor(k / (p * v)) * p + (k % p);
  const chunk = (k: number, back: boolean) => (back ? v - 1 - (Math.floor(k / p) % v) : Math.floor(k / p) % v);
  return hoistReceives(withComm(
    'interleaved',
    p,
    m,
    v,
    range(p).map((r) => {
      const total = m * v, warm = Math.min(2 * (p - r - 1) + (v - 1) * p, total);
      const f = (k: number) => F(micro(k), chunk(k, false) * p + r),
        b = (k: number) => B(micro(k), chunk(k, true) * p + r);
      const list = range(warm).map(f);
      for (let i = 0; i < total - warm; i++) list.push(f(warm + i), b(i));
      for (let i = total - warm; i < total; i++) list.push(b(i));
      return list;
    }),
  ));
}

/**
 * Makes a schedule safe for rendezvous sends: while the simulation deadlocks, the receive a
 * stuck send waits for is moved up into the peer's current batch (Megatron's receive-ahead:
 * send_backward_recv_forward and friends post both directions together). Receiving earlier
 * never breaks a data dependency; the buffered simulation is rechecked by checkSchedule.
 */
export function hoistReceives(s: PipelineSchedule): PipelineSchedule {
  for (let round = 0; round < 4 * s.p * s.m * s.v; round++) {
    const { pc } = simulate(s, { forwardMs: 1, backwardMs: 1, p2pMs: 0 }, 'rendezvous');
    const r = pc.findIndex((i, rank) => i < s.ranks[rank].length);
    if (r < 0) return s;
    let moved = false;
    for (let i = pc[r]; !moved && i < s.ranks[r].length && isComm(s.ranks[r][i].kind); i++) {
      const a = s.ranks[r][i], q = s.ranks[a.peer!];
      if (!a.kind.startsWith('send')) continue;
      let end = pc[a.peer!];
      while (end < q.length && isComm(q[end].kind)) end++;
      const j = q.findIndex((b, k) => k >= end && b.kind.startsWith('recv') && messageKey(b) === messageKey(a));
      if (j >= 0) {
        q.splice(end, 0, ...q.splice(j, 1));
        moved = true;
      }
    }
    if (!moved) return s; // a deadlock this cannot fix; checkSchedule reports it
  }
  return s;
}

/**
 * The schedule `kind` for p ranks and m micro-batches (v only for interleaved).
 * @throws Error for an unknown kind (naming the allowed ones) or non-positive sizes.
 */
export function makeSchedule(kind: ScheduleKind, p: number, m: number, v = 1): PipelineSchedule {
  if (kind === 'gpipe') return gpipe(p, m);
  if (kind === '1f1b') return oneFOneB(p, m);
  if (kind === 'interleaved') return interleaved(p, m, v);
  if (kind === 'zb-h1') return zbH1(p, m);
  throw new Error(`unknown pipeline schedule '${kind}'; allowed: ${SCHEDULE_KINDS.join(', ')}`);
}

/**
 * Most stage activations each rank holds at once: forwards done whose backward is not, or, in a
 * split schedule, whose W is not (W still reads what B kept; zero-bubble counting, arXiv 2401.10241).
 */
export function peakInFlight(s: PipelineSchedule): number[] {
  const split = s.ranks.some((l) => l.some((a) => a.kind === 'weight'));
  return s.ranks.map((list) => {
    let live = 0, peak = 0;
    for (const a of list) {
      if (a.kind === 'forward') peak = Math.max(peak, ++live);
      else if (a.kind === (split ? 'weight' : 'backward')) live--;
    }
    return peak;
  });
}
