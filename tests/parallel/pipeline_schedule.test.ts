/** Pipeline schedules as data: invariants, deadlock checks, dry-run bubbles and in-flight activations. */
import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import {
  checkSchedule,
  gpipe,
  interleaved,
  makeSchedule,
  oneFOneB,
  peakInFlight,
  type PipelineSchedule,
  scheduleProblems,
} from '../../src/parallel/pipeline/pipeline_schedule.ts';
import { dryRun } from '../../src/parallel/pipeline/pipeline_sim.ts';
import { bubbleFraction } from '../../src/parallel/pipeline/pipeline_sim.ts';

const PS = [1, 2, 3, 4], MS = [1, 2, 3, 4, 8];
const clone = (s: PipelineSchedule): PipelineSchedule => ({
  ...s,
  ranks: s.ranks.map((l) => l.map((a) => ({ ...a }))),
});
const close = (a: number, b: number, what: string) => ok(Math.abs(a - b) < 1e-12, `${what}: ${a} vs ${b}`);

Deno.test('GPipe and 1F1B: valid for p ∈ {1..4}, m ∈ {1,2,3,4,8}; each rank runs every micro-batch once forward, once backward', () => {
  for (const make of [gpipe, oneFOneB]) {
    for (const p of PS) {
      for (const m of MS) {
        const s = checkSchedule(make(p, m));
        s.ranks.forEach((list, r) => {
          for (const kind of ['forward', 'backward'] as const) {
            deepStrictEqual(list.filter((a) => a.kind === kind).map((a) => a.micro).sort((x, y) => x - y), [
              ...Array(m).keys(),
            ], `${s.kind} p${p} m${m} rank ${r} ${kind}`);
          }
          const sends = list.filter((a) => a.kind === 'send-act').length,
            grads = list.filter((a) => a.kind === 'send-grad').length;
          equal(sends, r < p - 1 ? m : 0);
          equal(grads, r > 0 ? m : 0);
        });
      }
    }
  }
});

Deno.test('1F1B follows PipeDream-Flush: p−r−1 warm-up forwards, then alternating, then the drain', () => {
  const s = oneFOneB(4, 8);
  const order = (r: number) =>
    s.ranks[r].filter((a) => a.kind === 'forward' || a.kind === 'backward').map((a) =>
      `${a.kind[0].toUpperCase()}${a.micro}`
    );
  deepStrictEqual(order(0).slice(0, 5), ['F0', 'F1', 'F2', 'F3', 'B0']);
  deepStrictEqual(order(3).slice(0, 4), ['F0', 'B0', 'F1', 'B1']);
  deepStrictEqual(order(1).slice(-3), ['B5', 'B6', 'B7']);
  deepStrictEqual(order(2).slice(0, 3), ['F0', 'F1', 'B0']);
});

Deno.test('dry run with equal stage costs and free messages: bubble = (p−1)/(m+p−1) for GPipe and 1F1B, both semantics', () => {
  for (const make of [gpipe, oneFOneB]) {
    for (const p of PS) {
      for (const m of MS) {
        for (const [f, b] of [[1, 1], [1, 2], [0.5, 1.5]]) {
          for (const mode of ['buffered', 'rendezvous'] as const) {
            const d = dryRun(make(p, m), { forwardMs: f, backwardMs: b, p2pMs: 0 }, mode);
            close(d.bubble, (p - 1) / (m + p - 1), `${make.name} p${p} m${m} f${f} b${b} ${mode}`);
            close(d.makespan, (m + p - 1) * (f + b), `${make.name} makespan`);
            d.ranks.forEach((spans) => {
              equal(spans[0].start, 0);
              equal(spans.at(-1)!.end, d.makespan);
              for (let i = 1; i < spans.length; i++) equal(spans[i].start, spans[i - 1].end, 'spans tile the step');
            });
          }
        }
      }
    }
  }
});

Deno.test('messages cost time: p2p > 0 lengthens the step and shows as comm', () => {
  const free = dryRun(oneFOneB(4, 8), { forwardMs: 1, backwardMs: 2, p2pMs: 0 });
  const paid = dryRun(oneFOneB(4, 8), { forwardMs: 1, backwardMs: 2, p2pMs: 0.25 });
  ok(paid.makespan > free.makespan);
  ok(paid.comm > 0 && free.comm === 0);
  ok(
    paid.ranks[1].some((x) => x.kind === 'comm' && x.label.startsWith('ra')),
    'rank 1 waits on an activation transfer',
  );
  throws(
    () => dryRun(gpipe(2, 2), { forwardMs: -1, backwardMs: 1, p2pMs: 0 }),
    /forwardMs must be a finite number ≥ 0/,
  );
});

Deno.test('peak in-flight activations: 1F1B holds min(p−r, m) ≤ p (stage 0 holds p), GPipe holds m', () => {
  for (const p of PS) {
    for (const m of MS) {
      deepStrictEqual(peakInFlight(gpipe(p, m)), Array(p).fill(m));
      const one = peakInFlight(oneFOneB(p, m));
      deepStrictEqual(one, [...Array(p).keys()].map((r) => Math.min(p - r, m)));
      ok(one.every((x) => x <= p));
      if (m >= p) equal(one[0], p);
    }
  }
});

Deno.test('interleaved 1F1B: valid, bubble (p−1)/(v·m+p−1) buffered, deadlock-free under rendezvous sends', () => {
  for (const p of [1, 2, 3, 4]) {
    for (const v of [2, 3]) {
      for (const m of [p, 2 * p]) {
        const s = checkSchedule(interleaved(p, m, v));
        equal(s.ranks.flat().filter((a) => a.kind === 'forward').length, m * v * p);
        close(
          dryRun(s, { forwardMs: 1, backwardMs: 2, p2pMs: 0 }).bubble,
          bubbleFraction(p, m, v),
          `p${p} v${v} m${m}`,
        );
        dryRun(s, { forwardMs: 1, backwardMs: 2, p2pMs: 0 }, 'rendezvous');
      }
    }
  }
  ok(
    dryRun(interleaved(4, 8, 2), { forwardMs: 1, backwardMs: 1, p2pMs: 0 }).bubble <
      dryRun(oneFOneB(4, 8), { forwardMs: 1, backwardMs: 1, p2pMs: 0 }).bubble,
  );
  throws(() => interleaved(4, 6, 2), /micro-batches 6 must be a multiple of pp 4/);
  throws(
    () => makeSchedule('zigzag' as never, 2, 2),
    /unknown pipeline schedule 'zigzag'; allowed: gpipe, 1f1b, interleaved/,
  );
  throws(() => gpipe(0, 2), /p = 0 .* positive integers/);
});

Deno.test('checkSchedule names the rank and action that break a rule', () => {
  // Backward before forward.
  let s = clone(oneFOneB(2, 2));
  const list = s.ranks[1];
  const f = list.findIndex((a) => a.kind === 'forward' && a.micro === 0),
    b = list.findIndex((a) => a.kind === 'backward' && a.micro === 0);
  [list[f], list[b]] = [list[b], list[f]];
  throws(() => checkSchedule(s), /rank 1 stage 1 micro 0: backward \(action \d+\) runs before its forward/);
  // A missing receive leaves a send unmatched.
  s = clone(gpipe(2, 2));
  s.ranks[1] = s.ranks[1].filter((a) => !(a.kind === 'recv-act' && a.micro === 1));
  match(scheduleProblems(s).join('\n'), /rank 1 stage 1 micro 1: missing recv-act/);
  // A wrong peer.
  s = clone(gpipe(3, 1));
  s.ranks[1].find((a) => a.kind === 'send-act')!.peer = 0;
  match(scheduleProblems(s).join('\n'), /rank 1 action \d+ \(send-act micro 0 stage 1 peer 0\): peer should be rank 2/);
  // Duplicate forward and a missing micro-batch.
  s = clone(gpipe(1, 2));
  s.ranks[0][1] = { ...s.ranks[0][0] };
  const probs = scheduleProblems(s).join('\n');
  match(probs, /rank 0 action 1 \(forward micro 0 stage 0\): repeats action 0/);
  match(probs, /rank 0 stage 0 micro 1: no forward/);
  // Rank 0 takes micro 1's gradient first while rank 1 sends micro 0's first: fine buffered, a deadlock under rendezvous.
  s = clone(gpipe(2, 2));
  s.ranks[0].splice(
    4,
    4,
    { kind: 'recv-grad', micro: 1, stage: 0, peer: 1 },
    { kind: 'backward', micro: 1, stage: 0 },
    { kind: 'recv-grad', micro: 0, stage: 0, peer: 1 },
    { kind: 'backward', micro: 0, stage: 0 },
  );
  const dl = scheduleProblems(s).join('\n');
  match(
    dl,
    /deadlock with rendezvous sends: rank 0 waits at action 4 \(recv-grad micro 1 stage 0 peer 1\); rank 1 waits at action 5 \(send-grad micro 0 stage 1 peer 0\)/,
  );
  ok(!/deadlock with buffered/.test(dl), 'buffered sends let rank 0 run ahead');
});
