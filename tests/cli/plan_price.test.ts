/** `npm run plan -- <degrees> --device P [--json FILE]` in a subprocess: the price printed and written, its parts summing to the step. */
import { equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';

const SHAPE = ['--n-layer', '2', '--n-head', '2', '--n-embd', '32', '--block-size', '16', '--batch-size', '8'];
const PLAN = [...SHAPE, '--vocab-size', '64', '--dp', '2', '--pp', '2', '--micro-batches', '4'];

Deno.test({
  name: 'plan --device --json: step, MFU, TFLOP/s per device, breakdown and memory, in ms, fraction and bytes',
  sanitizeResources: false,
  fn: async () => {
    const file = await Deno.makeTempFile({ suffix: '.json' });
    try {
      const r = await runCli('plan.ts', [...PLAN, '--precision', 'bf16-mixed', '--device', 'h100-sxm', '--json', file]);
      equal(r.code, 0, r.stderr);
      match(r.stdout, /^step time on h100-sxm \(bf16, flash attention, recompute none; .*the search's pricing\):$/m);
      match(r.stdout, /^ {2}step \S+ ms · MFU \d+\.\d% of 989\.0 TFLOP\/s · \S+ TFLOP\/s per device$/m);
      match(r.stdout, /^ {2}model FLOPs: 6N \+ 12·L·h·T FLOPs per token \(PaLM/m);
      match(
        r.stdout,
        /^ {2}breakdown: compute \S+ ms · exposed dp \S+ ms, tp \S+ ms, pp \S+ ms, cp \S+ ms, ep \S+ ms/m,
      );
      const j = JSON.parse(await Deno.readTextFile(file));
      ok(j.stepMs > 0);
      const b = j.breakdown, e = b.exposedMs;
      // predictStep's step is exactly compute + each exposed dimension + bubble + optimizer.
      const parts = b.computeMs + e.dp + e.tp + e.pp + e.cp + e.ep + b.bubbleMs + b.optimizerMs;
      ok(Math.abs(parts - j.stepMs) <= 1e-9 * j.stepMs, `${parts} vs ${j.stepMs}`);
      ok(b.bubbleMs > 0 && e.dp > 0 && e.pp > 0, JSON.stringify(b));
      equal(b.bubbleFraction, 1 / (4 + 1)); // (p − 1)/(m + p − 1), p 2, m 4
      ok(j.mfu > 0 && j.mfu < 1);
      const peak = DEVICE_PROFILES['h100-sxm'].peakF16 / 1e12;
      ok(Math.abs(j.tflopsPerDevice - j.mfu * peak) <= 1e-9 * peak, `${j.tflopsPerDevice} vs ${j.mfu} × ${peak}`);
      equal(j.memory.totalBytes, j.memory.statesBytes + j.memory.activationsBytes);
      ok(j.memory.activationsBytes > 0);
      match(j.flops, /^6N \+ 12·L·h·T/);
    } finally {
      await Deno.remove(file);
    }
  },
});

Deno.test({
  name: 'plan without --device says how to price the step; --json without --device is one error line',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('plan.ts', PLAN);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /^step time: not predicted; add --device <preset\|profile\.json> \(and --net\)/m);
    const bad = await runCli('plan.ts', [...PLAN, '--json', 'x.json']);
    ok(bad.code !== 0);
    const lines = bad.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
    equal(lines.length, 1, bad.stderr);
    match(lines[0], /--json prices the step and needs --device/);
  },
});
