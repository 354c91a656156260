/**
 * Pipeline schedules run on a simulated clock: the deadlock check of pipeline_schedule.ts's
 * rules, the predicted timeline of a valid schedule ({@link dryRun}) that `npm run plan`
 * draws and the mesh trainer's measured timeline is compared with, and the bubble fraction.
 */
import type { ActionKind, PipeAction, PipelineSchedule } from './pipeline_schedule.ts';

/**
 * Per-action costs in ms; p2pMs is the time one activation or gradient message takes. backwardMs
 * is the whole backward (B + W); in a split schedule (zero_bubble.ts) W costs weightMs (default
 * backwardMs / 2, the zero-bubble paper's T_B = T_W) and B the rest.
 */
export interface StageCosts {
  forwardMs: number;
  backwardMs: number;
  p2pMs: number;
  weightMs?: number;
}

export type SimMode = 'buffered' | 'rendezvous';

/** A span of one rank's predicted timeline (ms). `label` names the action, e.g. `F3` / `B0`. */
export interface Span {
  kind: 'compute' | 'comm' | 'idle';
  start: number;
  end: number;
  label: string;
  action?: PipeAction;
}

export interface DryRun {
  /** Spans per rank in time order, covering [0, makespan] without gaps. */
  ranks: Span[][];
  makespan: number;
  /** Idle share of p·makespan (the pipeline bubble). */
  bubble: number;
  /** Share of p·makespan spent transferring. */
  comm: number;
}

/** Whether an action is a message (a send or a receive) rather than compute. */
export const isComm = (k: ActionKind) => k !== 'forward' && k !== 'backward' && k !== 'weight';
/** `F3`, `B0`, `sa2@1`: an action's span label; `withStage` adds `@stage` to compute too (measured timelines, where a rank runs several stages). */
export const label = (a: PipeAction, withStage = false) =>
  ({
    forward: 'F',
    backward: 'B',
    weight: 'W',
    'send-act': 'sa',
    'recv-act': 'ra',
    'send-grad': 'sg',
    'recv-grad': 'rg',
  })[a.kind] +
  a.micro +
  (withStage || isComm(a.kind) ? `@${a.stage}` : '');
/** `send-act micro 2 stage 1 peer 2`, as error messages name an action. */
export const describeAction = (a: PipeAction) =>
  `${a.kind} micro ${a.micro} stage ${a.stage}${a.peer === undefined ? '' : ` peer ${a.peer}`}`;

export /** Message identity shared by a send and its receive: what flows, for which micro, from which stage. */
function messageKey(a: PipeAction): string {
  const from = a.kind === 'recv-act' ? a.stage - 1 : a.kind === 'recv-grad' ? a.stage + 1 : a.stage;
  return `${a.kind.endsWith('act') ? 'act' : 'grad'}:${a.micro}:${from}`;
}

/**
 * Runs the programs on a simulated clock. Compute advances the rank's clock by its cost;
 * `buffered`: a send is free for the sender and arrives p2pMs later, a receive waits for
 * the arrival; `rendezvous`: a batch of messages is posted at once, each pair completes
 * p2pMs after both ends are posted, the batch when all its pairs have. Ranks left unfinished
 * are reported in `stuck` (a deadlock) with the action each waits on.
 */
export function simulate(
  s: PipelineSchedule,
  c: StageCosts,
  mode: SimMode,
): { ranks: Span[][]; stuck: string[]; pc: number[] } {
  const pc = s.ranks.map(() => 0), now = s.ranks.map(() => 0), spans: Span[][] = s.ranks.map(() => []);
  const sent = new Map<string, number>(); // buffered: key → arrival; rendezvous: key → post time of the send
  const posted = new Map<string, number>(); // rendezvous: key → post time of the receive
  const batchPosted = s.ranks.map(() => -1);
  const split = s.ranks.some((l) => l.some((a) => a.kind === 'weight')), w = c.weightMs ?? c.backwardMs / 2;
  const costOf = { forward: c.forwardMs, backward: split ? c.backwardMs - w : c.backwardMs, weight: w };
  const wait = (r: number, until: number, transfer: number, a: PipeAction) => {
    const startComm = Math.max(now[r], until - transfer);
    if (startComm > now[r]) spans[r].push({ kind: 'idle', start: now[r], end: startComm, label: '.' });
    if (until > startComm) spans[r].push({ kind: 'comm', start: startComm, end: until, label: label(a), action: a });
    now[r] = Math.max(now[r], until);
  };
  for (let progress = true; progress;) {
    progress = false;
    s.ranks.forEach((list, r) => {
      while (pc[r] < list.length) {
        const a = list[pc[r]];
        if (!isComm(a.kind)) {
          const cost = costOf[a.kind as keyof typeof costOf];
          spans[r].push({ kind: 'compute', start: now[r], end: now[r] + cost, label: label(a), action: a });
          now[r] += cost;
        } else if (mode === 'buffered') {
          if (a.kind.startsWith('send')) sent.set(messageKey(a), now[r] + c.p2pMs);
          else if (sent.has(messageKey(a))) wait(r, sent.get(messageKey(a))!, c.p2pMs, a);
          else return;
        } else {
          let end = pc[r];
          while (end < list.length && isComm(list[end].kind)) end++;
          const batch = list.slice(pc[r], end);
          if (batchPosted[r] !== pc[r]) {
            batchPosted[r] = pc[r];
            for (const b of batch) (b.kind.startsWith('send') ? sent : posted).set(messageKey(b), now[r]);
            progress = true;
          }
          const done = batch.map((b) => {
            const k = messageKey(b), other = b.kind.startsWith('send') ? posted.get(k) : sent.get(k);
            return other === undefined ? undefined : Math.max(other, now[r]) + c.p2pMs;
          });
          if (done.some((d) => d === undefined)) return;
          const last = done.indexOf(Math.max(...(done as number[])));
          wait(r, done[last]!, c.p2pMs, batch[last]);
          pc[r] = end;
          progress = true;
          continue;
        }
        pc[r]++;
        progress = true;
      }
    });
  }
  // Name the first message still unmatched (in a rendezvous batch it need not be the first).
  const unmatched = (list: PipeAction[], i: number) => {
    for (let j = i; mode === 'rendezvous' && j < list.length && isComm(list[j].kind); j++) {
      if (!(list[j].kind.startsWith('send') ? posted : sent).has(messageKey(list[j]))) return j;
    }
    return i;
  };
  const stuck = s.ranks.flatMap((list, r) => {
    if (pc[r] >= list.length) return [];
    const i = unmatched(list, pc[r]);
    return [`rank ${r} waits at action ${i} (${describeAction(list[i])})`];
  });
  return { ranks: spans, stuck, pc };
}

/**
 * Predicted timeline of a valid schedule under `costs` (ms per forward / backward of one
 * stage on one micro-batch, ms per message). Bubble = idle share of p·makespan; with equal
 * stage costs and p2pMs = 0 it is (p−1)/(m+p−1) for GPipe and 1F1B.
 * @throws Error when a cost is negative or not finite, or the schedule deadlocks.
 */
export function dryRun(s: PipelineSchedule, costs: StageCosts, mode: SimMode = 'buffered'): DryRun {
  for (const [k, x] of Object.entries(costs)) {
    if (!Number.isFinite(x) || x < 0) throw new Error(`dryRun: ${k} must be a finite number ≥ 0, got ${x}`);
  }
  if ((costs.weightMs ?? 0) > costs.backwardMs) {
    throw new Error(
      `dryRun: weightMs ${costs.weightMs} exceeds backwardMs ${costs.backwardMs} (W is part of the backward)`,
    );
  }
  const { ranks, stuck } = simulate(s, costs, mode);
  if (stuck.length) throw new Error(`dryRun: ${s.kind} schedule deadlocks with ${mode} sends: ${stuck.join('; ')}`);
  const makespan = Math.max(0, ...ranks.map((l) => (l.length ? l[l.length - 1].end : 0)));
  ranks.forEach((l) => {
    const end = l.length ? l[l.length - 1].end : 0;
    if (end < makespan) l.push({ kind: 'idle', start: end, end: makespan, label: '.' });
  });
  const total = (kind: Span['kind']) =>
    ranks.flat().filter((x) => x.kind === kind).reduce((a, x) => a + x.end - x.start, 0);
  const denom = s.p * makespan || 1;
  return { ranks, makespan, bubble: total('idle') / denom, comm: total('comm') / denom };
}

/**
 * Share of a step the pipeline idles: (p−1)/(v·m + p−1) for p stages, m micro-batches and
 * v model chunks per rank (v = 1: GPipe and 1F1B, Huang et al. / Narayanan et al.; v > 1:
 * interleaved 1F1B shrinks the bubble v-fold). @throws Error on non-positive inputs.
 */
export function bubbleFraction(p: number, m: number, v = 1): number {
  if (![p, m, v].every((x) => Number.isInteger(x) && x >= 1)) {
    throw new Error(`bubbleFraction: p ${p}, m ${m}, v ${v} must be positive integers`);
  }
  return (p - 1) / (v * m + p - 1);
}
