/**
 * The compression lesson's data (src/app/panels/compress_replay.ts, compress_run.ts): its inputs,
 * the words per rank read from send spans, the error-feedback invariants, and a real traced run
 * on the test GPU whose decoded messages, residuals and words obey them.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import type { Span } from '../../src/comm/trace.ts';
import { parseScheme, schemeWords } from '../../src/comm/compression.ts';
import {
  type CompressStep,
  invariantAfter,
  LESSON,
  lessonInput,
  rawWords,
  wordsByRank,
} from '../../src/app/panels/compress_replay.ts';
import { traceCompressedSteps } from '../../src/app/panels/compress_run.ts';

const send = (rank: number, op: string, bytes: number): Span => ({
  rank,
  kind: 'send',
  op,
  group: 'world',
  algorithm: '',
  bytes,
  peer: 1 - rank,
  start: 0,
  end: 0,
  simStart: 0,
  simEnd: 0,
});

Deno.test('lesson inputs: fixed, exact in f32 (multiples of 1/64), drifting step to step, different per rank', () => {
  const { n } = LESSON;
  deepStrictEqual(lessonInput(0, 2, n), lessonInput(0, 2, n));
  for (const x of [lessonInput(0, 0, n), lessonInput(1, 3, n)]) ok(x.every((v) => Number.isInteger(v * 64)));
  ok(lessonInput(0, 0, n).some((v, i) => v !== lessonInput(0, 1, n)[i]), 'the input drifts');
  ok(lessonInput(0, 0, n).some((v, i) => v !== lessonInput(1, 0, n)[i]), 'ranks differ');
  equal(rawWords(24, 2), 24);
  equal(rawWords(10, 3), 16);
});

Deno.test('words by rank: send spans by phase; other spans ignored; a foreign op refused', () => {
  const spans = [send(0, 'allToAll', 16), send(0, 'allGather', 16), send(1, 'allToAll', 16), send(1, 'allGather', 8)];
  spans.push({ ...send(0, 'allToAll', 400), kind: 'collective' });
  deepStrictEqual(wordsByRank(spans, 2), [
    { allToAll: 4, allGather: 4, total: 8 },
    { allToAll: 4, allGather: 2, total: 6 },
  ]);
  throws(() => wordsByRank([send(0, 'allReduce', 8)], 2), /compressed allReduce sends allToAll and allGather only/);
});

/** Two-phase top-1 with error feedback on the CPU, two ranks of four values: the lesson's bookkeeping. */
function simulated(steps: number): CompressStep[] {
  const top1 = (v: number[]) => {
    const k = v.reduce((b, x, i) => (Math.abs(x) > Math.abs(v[b]) ? i : b), 0);
    return v.map((x, i) => (i === k ? x : 0));
  };
  const n = 4, c = 2, e1 = [[0, 0, 0, 0], [0, 0, 0, 0]], e2 = [0, 0, 0, 0];
  const out: CompressStep[] = [];
  for (let t = 0; t < steps; t++) {
    const inputs = [0, 1].map((r) => Float32Array.from({ length: n }, (_, i) => (r + 1) * (i - 1.5) + t / 4));
    const sent = [0, 1].map((r) => {
      const s: number[] = [];
      for (let j = 0; j < 2; j++) {
        const corr = [0, 1].map((i) => inputs[r][j * c + i] + e1[r][j * c + i]), d = top1(corr);
        d.forEach((v, i) => (s.push(v), e1[r][j * c + i] = corr[i] - v));
      }
      return Float32Array.from(s);
    });
    const output = new Float32Array(n);
    for (let j = 0; j < 2; j++) {
      const corr = [0, 1].map((i) => sent[0][j * c + i] + sent[1][j * c + i] + e2[j * c + i]), d = top1(corr);
      d.forEach((v, i) => (output[j * c + i] = v, e2[j * c + i] = corr[i] - v));
    }
    const words = [0, 1].map(() => ({ allToAll: 2, allGather: 2, total: 4 }));
    out.push({
      inputs,
      sent,
      residual: e1.map((e) => Float32Array.from(e)),
      output,
      reducedResidual: Float32Array.from(e2),
      words,
    });
  }
  return out;
}

Deno.test('invariants: Σ sent + e₁ = Σ x per rank and Σ out + e₂ + Σ e₁ = Σ x for the call, every step', () => {
  const steps = simulated(4);
  for (let t = 1; t <= 4; t++) {
    const inv = invariantAfter(steps, t);
    ok(inv.gap < 1e-6, `step ${t}: gap ${inv.gap}`);
    for (const r of inv.ranks) ok(Math.abs(r.sent + r.residual - r.inputs) < 1e-6);
    ok(Math.abs(inv.delivered + inv.residual - inv.inputs) < 1e-6);
    ok(steps[t - 1].residual.some((e) => e.some((v) => v !== 0)), 'something is still owed');
  }
  equal(
    invariantAfter(steps, 2).inputs,
    steps.slice(0, 2).flatMap((s) => s.inputs).reduce((a, x) => a + x.reduce((b, v) => b + v, 0), 0),
  );
  // A residual that forgets what was dropped breaks the identity.
  const broken = simulated(2);
  broken[1].residual[0].fill(0);
  ok(invariantAfter(broken, 2).gap > 0.1);
  throws(() => invariantAfter(steps, 0), /step 0 is outside 1–4/);
  throws(() => invariantAfter(steps, 5), /outside/);
});

gpuTest('a traced compressed allReduce: decoded messages, residuals and words obey error feedback', async (gpu) => {
  for (const scheme of ['topk:0.1', 'sign']) {
    const steps = await traceCompressedSteps(gpu, scheme);
    const { p, n } = LESSON, c = Math.ceil(n / p), s = parseScheme(scheme);
    equal(steps.length, LESSON.steps);
    for (const [t, st] of steps.entries()) {
      deepStrictEqual(st.inputs, [0, 1].map((r) => lessonInput(r, t, n)));
      // The trace's words are the formula's: one compressed chunk each way per phase.
      for (const w of st.words) {
        deepStrictEqual(w, { allToAll: schemeWords(s, c), allGather: schemeWords(s, c), total: 2 * schemeWords(s, c) });
      }
      if (scheme.startsWith('topk')) {
        for (const m of st.sent) {
          equal(m.filter((v) => v !== 0).length, 2 * Math.ceil(0.1 * c), `${scheme}: k values per chunk`);
        }
      }
      const inv = invariantAfter(steps, t + 1);
      ok(inv.gap < 1e-4, `${scheme} step ${t + 1}: gap ${inv.gap}`);
    }
    ok(
      steps[1].residual[0].some((v, i) => v !== steps[0].residual[0][i]),
      `${scheme}: the residual changes step to step`,
    );
    ok(steps[0].residual[0].some((v) => v !== 0), `${scheme}: something was dropped`);
  }
});
