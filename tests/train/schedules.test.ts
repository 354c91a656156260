import { ok } from 'node:assert/strict';
import { cosineWithWarmup } from '../../src/train/schedules.ts';

const o = { lr: 1e-3, minLr: 1e-4, warmup: 100, decaySteps: 2000 };
const near = (a: number, b: number) => Math.abs(a - b) <= 1e-12 + 1e-9 * Math.abs(b);

Deno.test('cosine with warmup: warmup ramp, peak, minimum, continuity (nanoGPT get_lr)', () => {
  ok(near(cosineWithWarmup(0, o), 1e-3 / 101));
  ok(near(cosineWithWarmup(99, o), 1e-3 * 100 / 101));
  ok(near(cosineWithWarmup(100, o), 1e-3), 'peak at the end of warmup');
  ok(near(cosineWithWarmup(1050, o), 1e-4 + 0.5 * (1e-3 - 1e-4)), 'half way is the mean of lr and minLr');
  ok(near(cosineWithWarmup(2000, o), 1e-4));
  ok(near(cosineWithWarmup(5000, o), 1e-4), 'constant after decay');
  for (let s = 101; s < 2000; s++) ok(cosineWithWarmup(s, o) <= cosineWithWarmup(s - 1, o) + 1e-15, `monotone at ${s}`);
  ok(Math.abs(cosineWithWarmup(100, o) - cosineWithWarmup(99, o)) < 2e-5, 'continuous at the phase change');
});
