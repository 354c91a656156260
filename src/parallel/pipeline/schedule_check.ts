/**
 * The rules a pipeline schedule (pipeline_schedule.ts) must keep, and the check that proves it
 * deadlock-free on the simulated clock (pipeline_sim.ts) under both send semantics
 * (docs/design.md#pipeline-schedules-and-the-bubble). A split schedule (any `weight` action,
 * zero_bubble.ts) must run each (micro, stage)'s W once, after its B.
 */
import { type ActionKind, checkShape, type PipelineSchedule, rankOfStage } from './pipeline_schedule.ts';
import { describeAction, isComm, simulate } from './pipeline_sim.ts';

/** Every rule a schedule breaks (empty when valid), each naming the rank and action. */
export function scheduleProblems(s: PipelineSchedule): string[] {
  const { p, m, v } = s, S = p * v, out: string[] = [];
  try {
    checkShape(p, m, v);
  } catch (e) {
    return [(e as Error).message];
  }
  if (s.ranks.length !== p) return [`schedule has ${s.ranks.length} rank programs for p = ${p}`];
  const split = s.ranks.some((l) => l.some((a) => a.kind === 'weight'));
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
      } else if (!['forward', 'backward', 'weight'].includes(a.kind)) {
        return out.push(`${where(i)}: unknown action kind`);
      }
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
        const w = need('weight', i, st);
        if (split && w === undefined) out.push(`${tag}: no weight (W) pass in a split schedule`);
        if (w !== undefined && w < b) out.push(`${tag}: weight (action ${w}) runs before its backward (action ${b})`);
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
 * every backward after its forward (every W after its B), every send matched one-to-one by a receive on the peer
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
