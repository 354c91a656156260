/**
 * Pipeline-parallel schedules written as data (docs/design.md#pipeline-schedules-and-the-bubble): for p ranks, v
 * virtual stages per rank (S = p·v stages) and m micro-batches, one list of {@link PipeAction}s per rank.
 *
 * Layout: stage s lives on rank s mod p, so rank r holds stages r, r+p, …, r+(v−1)p
 * (Megatron's interleaved layout; v = 1 is the plain pipeline where stage = rank).
 *
 * Every action names the *local* stage it serves on its own rank:
 * - `forward` / `backward` (micro, stage): compute of that stage for that micro-batch;
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
import { describeAction, isComm, messageKey, simulate } from './pipeline_sim.ts';

export type ActionKind = 'forward' | 'backward' | 'send-act' | 'recv-act' | 'send-grad' | 'recv-grad';
export type ScheduleKind = 'gpipe' | '1f1b' | 'interleaved';
export const SCHEDULE_KINDS: readonly ScheduleKind[] = ['gpipe', '1f1b', 'interleaved'];

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
function checkShape(p: number, m: number, v: number): void {
  const bad = ([['p', p], ['m', m], ['v', v]] as const).filter(([, x]) => !Number.isInteger(x) || x < 1);
  if (bad.length) {
    throw new Error(`pipeline schedule: ${bad.map(([n, x]) => `${n} = ${x}`).join(', ')} must be positive integers`);
  }
}

type Compute = { kind: 'forward' | 'backward'; micro: number; stage: number };

/** Adds the messages around each compute: receive just before, send just after. */
function withComm(kind: ScheduleKind, p: number, m: number, v: number, compute: Compute[][]): PipelineSchedule {
  const S = p * v;
  const ranks = compute.map((list, r) => {
    const out: PipeAction[] = [];
    for (const c of list) {
      const prev = c.stage - 1, next = c.stage + 1;
      const remote = (s: number) => s >= 0 && s < S && rankOfStage(s, p) !== r;
      if (c.kind === 'forward') {
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
function hoistReceives(s: PipelineSchedule): PipelineSchedule {
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
  throw new Error(`unknown pipeline schedule '${kind}'; allowed: ${SCHEDULE_KINDS.join(', ')}`);
}

/** Every rule a schedule breaks (empty when valid), each naming the rank and action. */
export function scheduleProblems(s: PipelineSchedule): string[] {
  const { p, m, v } = s, S = p * v, out: string[] = [];
  try {
    checkShape(p, m, v);
  } catch (e) {
    return [(e as Error).message];
  }
  if (s.ranks.length !== p) return [`schedule has ${s.ranks.length} rank programs for p = ${p}`];
  s.ranks.forEach((list, r) => {
    const at = new Map<string, number>();
    const where = (i: number) => `rank ${r} action ${i} (${describeAction(list[i])})`;
    list.forEach((a, i) => {
      if (!Number.isInteger(a.micro) || a.micro < 0 || a.micro >= m) {
        return out.push(`${where(i)}: micro-batch outside 0…${m - 1}`);
      }
      if (!Number.isInteger(a.stage) || a.stage < 0 || a.stage >= S || rankOfStage(a.stage, p) !== r) {
        return out.push(`${where(i)}: stage is not one of this rank's stages`);
      }
      if (isComm(a.kind)) {
        const other = a.kind === 'send-act' || a.kind === 'recv-grad' ? a.stage + 1 : a.stage - 1;
        if (other < 0 || other >= S || rankOfStage(other, p) === r) {
          return out.push(`${where(i)}: no remote stage ${other} to talk to`);
        }
        if (a.peer !== rankOfStage(other, p)) {
          return out.push(`${where(i)}: peer should be rank ${rankOfStage(other, p)} (stage ${other})`);
        }
      } else if (a.kind !== 'forward' && a.kind !== 'backward') return out.push(`${where(i)}: unknown action kind`);
      const key = `${a.kind}:${a.micro}:${a.stage}`;
      if (at.has(key)) return out.push(`${where(i)}: repeats action ${at.get(key)}`);
      at.set(key, i);
    });
    const need = (kind: ActionKind, micro: number, stage: number) => at.get(`${kind}:${micro}:${stage}`);
    for (let c = 0; c < v; c++) {
      const st = c * p + r;
      for (let i = 0; i < m; i++) {
        const f = need('forward', i, st), b = need('backward', i, st);
        const tag = `rank ${r} stage ${st} micro ${i}`;
        if (f === undefined) out.push(`${tag}: no forward`);
        if (b === undefined) out.push(`${tag}: no backward`);
        if (f === undefined || b === undefined) continue;
        if (b < f) out.push(`${tag}: backward (action ${b}) runs before its forward (action ${f})`);
        const order = (kind: ActionKind, stage: number, after: boolean, x: number, what: string) => {
          const j = need(kind, i, stage);
          if (j === undefined) out.push(`${tag}: missing ${kind} ${what}`);
          else if (after ? j < x : j > x) {
            out.push(`${tag}: ${kind} (action ${j}) must come ${after ? 'after' : 'before'} ${what}`);
          }
        };
        const local = (t: number) => t >= 0 && t < S && rankOfStage(t, p) === r;
        const remote = (t: number) => t >= 0 && t < S && rankOfStage(t, p) !== r;
        if (remote(st - 1)) order('recv-act', st, false, f, `its forward (action ${f})`);
        if (remote(st + 1)) order('send-act', st, true, f, `its forward (action ${f})`);
        if (remote(st + 1)) order('recv-grad', st, false, b, `its backward (action ${b})`);
        if (remote(st - 1)) order('send-grad', st, true, b, `its backward (action ${b})`);
        if (local(st - 1) && (need('forward', i, st - 1) ?? Infinity) > f) {
          out.push(`${tag}: forward runs before stage ${st - 1}'s forward`);
        }
        if (local(st + 1) && (need('backward', i, st + 1) ?? Infinity) > b) {
          out.push(`${tag}: backward runs before stage ${st + 1}'s backward`);
        }
      }
    }
  });
  if (out.length) return out;
  for (const mode of ['buffered', 'rendezvous'] as const) {
    const stuck = simulate(s, { forwardMs: 1, backwardMs: 1, p2pMs: 0 }, mode).stuck;
    if (stuck.length) out.push(`deadlock with ${mode} sends: ${stuck.join('; ')}`);
  }
  return out;
}

/**
 * Checks that every rank runs each of its stages' forward and backward once per micro-batch,
 * every backward after its forward, every send matched one-to-one by a receive on the peer
 * and in an order that cannot deadlock (simulated under both execution semantics).
 * @throws Error listing every broken rule (at most 20 lines), each naming rank and action.
 */
export function checkSchedule(s: PipelineSchedule): PipelineSchedule {
  const problems = scheduleProblems(s);
  if (problems.length) {
    const more = problems.length > 20 ? [`… and ${problems.length - 20} more`] : [];
    throw new Error(
      `invalid ${s.kind} schedule (p ${s.p}, m ${s.m}, v ${s.v}):\n  ${
        [...problems.slice(0, 20), ...more].join('\n  ')
      }`,
    );
  }
  return s;
}

/** Most stage activations each rank holds at once (forwards done whose backward is not). */
export function peakInFlight(s: PipelineSchedule): number[] {
  return s.ranks.map((list) => {
    let live = 0, peak = 0;
    for (const a of list) {
      if (a.kind === 'forward') peak = Math.max(peak, ++live);
      else if (a.kind === 'backward') live--;
    }
    return peak;
  });
}
