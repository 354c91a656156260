import { equal, ok } from 'node:assert/strict';
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

import { throws } from 'node:assert/strict';
import {
  lrAt,
  phaseBoundaries,
  scheduleFromConfig,
  type ScheduleSpec,
  validateSchedule,
} from '../../src/train/schedules.ts';
import { parseConfig } from '../../src/train/config.ts';

/** The largest |lr(s) − lr(s−1)| at each phase change of `spec` (steps b and b+1). */
function jumps(spec: ScheduleSpec): number[] {
  return phaseBoundaries(spec).flatMap((b) =>
    [b, b + 1].filter((s) => s >= 1).map((s) => Math.abs(lrAt(spec, s) - lrAt(spec, s - 1)))
  );
}
const cfgSpec = (o: Record<string, unknown>) => scheduleFromConfig(parseConfig(o));

Deno.test('the default config keeps nanoGPT cosine exactly', () => {
  const c = parseConfig({ lr: 1e-3, minLr: 1e-4, warmup: 100, steps: 2000 });
  const spec = scheduleFromConfig(c);
  for (const s of [0, 50, 99, 100, 101, 777, 1999, 2000, 2500]) equal(lrAt(spec, s), cosineWithWarmup(s, o));
});

Deno.test('WSD: warmup end, stable plateau, cooldown ends at minLr (linear and 1−sqrt), continuous', () => {
  const lin = cfgSpec({ schedule: 'wsd', lr: 1e-3, minLr: 1e-5, warmup: 100, steps: 1000, cooldownFrac: 0.2 });
  ok(near(lrAt(lin, 100), 1e-3), 'peak at the end of warmup');
  ok(near(lrAt(lin, 500), 1e-3) && near(lrAt(lin, 800), 1e-3), 'stable until the cooldown');
  ok(near(lrAt(lin, 900), 1e-5 + 0.5 * (1e-3 - 1e-5)), 'linear cooldown half way');
  ok(near(lrAt(lin, 1000), 1e-5) && near(lrAt(lin, 1500), 1e-5), 'cooldown ends at minLr and stays');
  for (const j of jumps(lin)) ok(j < 1.1e-5, `linear jump ${j}`);
  const sq = cfgSpec({
    schedule: 'wsd',
    lr: 1e-3,
    minLr: 0,
    warmup: 100,
    steps: 1000,
    cooldownFrac: 0.2,
    cooldownShape: 'sqrt',
  });
  ok(near(lrAt(sq, 900), 1e-3 * (1 - Math.sqrt(0.5))), '1−sqrt half way');
  ok(near(lrAt(sq, 1000), 0), '1−sqrt ends at minLr');
  // 1−sqrt starts steeply by design: its first step drops lr·√(1/cooldown), nothing more.
  for (const j of jumps(sq)) ok(j <= 1e-3 * Math.sqrt(1 / 200) + 1e-15, `sqrt jump ${j}`);
  for (let s = 801; s <= 1000; s++) ok(lrAt(sq, s) <= lrAt(sq, s - 1), `monotone cooldown at ${s}`);
});

Deno.test('constant + cooldown: flat from step 0 without warmup, optional cooldown', () => {
  const c = cfgSpec({ schedule: 'constant', lr: 2e-3, minLr: 2e-4, warmup: 0, steps: 100, cooldownFrac: 0.1 });
  ok(near(lrAt(c, 0), 2e-3) && near(lrAt(c, 90), 2e-3));
  ok(near(lrAt(c, 100), 2e-4));
  for (const j of jumps(c)) ok(j < 2e-4, `jump ${j}`);
  const flat = cfgSpec({ schedule: 'constant', lr: 2e-3, warmup: 0, steps: 100, cooldownFrac: 0 });
  for (const s of [0, 50, 99, 100, 200]) ok(near(lrAt(flat, s), 2e-3));
});

Deno.test('constant honours --warmup: nanoGPT ramp, then flat', () => {
  const c = cfgSpec({ schedule: 'constant', lr: 2e-3, warmup: 20, steps: 100, cooldownFrac: 0 });
  ok(near(lrAt(c, 0), 2e-3 / 21), `first step ${lrAt(c, 0)}`);
  ok(near(lrAt(c, 19), 2e-3 * 20 / 21));
  for (const s of [20, 50, 99]) ok(near(lrAt(c, s), 2e-3));
  for (const j of jumps(c)) ok(j <= 2e-3 / 21 + 1e-15, `jump ${j}`);
  throws(
    () =>
      validateSchedule(
        cfgSpec({ schedule: 'constant', lr: 1, minLr: 0, warmup: 90, steps: 100, cooldownFrac: 0.2 }),
        100,
      ),
    /warmup \(90\) plus cooldown \(20\)/,
  );
});

Deno.test('inverse sqrt: warmup to lr, then lr·√(warmup/step)', () => {
  const c = cfgSpec({ schedule: 'inverse-sqrt', lr: 1e-3, warmup: 100, steps: 10000 });
  ok(near(lrAt(c, 100), 1e-3));
  ok(near(lrAt(c, 400), 5e-4) && near(lrAt(c, 10000), 1e-4));
  for (const s of [200, 1000, 5000]) ok(near(lrAt(c, s) * Math.sqrt(s), lrAt(c, 100) * 10), `∝ 1/√step at ${s}`);
  for (const j of jumps(c)) ok(j < 2e-5, `jump ${j}`);
  const noWarm = cfgSpec({ schedule: 'inverse-sqrt', lr: 1e-3, warmup: 0, steps: 100 });
  ok(near(lrAt(noWarm, 0), 1e-3) && near(lrAt(noWarm, 4), 5e-4), 'no warmup: finite at step 0');
});

Deno.test('re-warm: starts at the checkpoint step from its LR (or 0), peaks, decays to minLr', () => {
  // A cosine run of 1000 steps ended at minLr 1e-4; continue to 3000 steps with a re-warm to 5e-4.
  const old = cfgSpec({ lr: 1e-3, minLr: 1e-4, warmup: 100, steps: 1000 });
  const c = cfgSpec({
    schedule: 'rewarm-cosine',
    lr: 5e-4,
    minLr: 5e-5,
    warmup: 200,
    steps: 3000,
    rewarmStart: 1000,
    rewarmFrom: lrAt(old, 1000),
  });
  equal(lrAt(c, 1000), lrAt(old, 1000), 'continues from the old LR at the checkpoint step');
  ok(Math.abs(lrAt(c, 1000) - lrAt(old, 999)) < 1e-8, 'no jump across the resume');
  ok(near(lrAt(c, 1100), 1e-4 + 0.5 * (5e-4 - 1e-4)), 'linear re-warm half way');
  ok(near(lrAt(c, 1200), 5e-4), 'peak after the re-warm');
  ok(near(lrAt(c, 2100), 5e-5 + 0.5 * (5e-4 - 5e-5)), 'cosine half way');
  ok(near(lrAt(c, 3000), 5e-5) && near(lrAt(c, 4000), 5e-5), 'minimum at the end');
  for (const j of jumps(c)) ok(j < 3e-6, `jump ${j}`);
  const zero = cfgSpec({
    schedule: 'rewarm-cosine',
    lr: 5e-4,
    minLr: 0,
    warmup: 200,
    steps: 3000,
    rewarmStart: 1000,
    rewarmFrom: 0,
  });
  equal(lrAt(zero, 1000), 0);
  ok(near(lrAt(zero, 1200), 5e-4));
  const fresh = cfgSpec({ schedule: 'rewarm-cosine', lr: 5e-4, minLr: 0, warmup: 10, steps: 100 });
  equal(lrAt(fresh, 0), 0, 'unresolved re-warm on a fresh run starts at step 0 from 0');
});

Deno.test('impossible schedules are rejected naming the keys', () => {
  throws(
    () => parseConfig({ schedule: 'wsd', steps: 100, warmup: 50, cooldownFrac: 0.6 }),
    /warmup \(50\) plus cooldown \(60 steps.*longer than the run \(100 steps\)/,
  );
  throws(() => parseConfig({ schedule: 'wsd', cooldownFrac: 1.5 }), /cooldownFrac: Too big/);
  throws(() => parseConfig({ schedule: 'linear' }), /schedule: Invalid option/);
  throws(
    () => parseConfig({ schedule: 'rewarm-cosine', steps: 100, rewarmStart: 90, warmup: 20 }),
    /re-warm .* ends after the decay end \(step 100\)/,
  );
  throws(
    () => parseConfig({ schedule: 'rewarm-cosine', steps: 100, rewarmStart: 200, warmup: 0 }),
    /rewarmStart \(200\) is after the end of the run/,
  );
  throws(
    () => parseConfig({ schedule: 'rewarm-cosine', steps: 100, lr: 1e-3, rewarmFrom: 2e-3, warmup: 0 }),
    /rewarmFrom \(0.002\) must not exceed lr/,
  );
  throws(
    () =>
      validateSchedule({ kind: 'constant', lr: 1, minLr: 0, warmup: 0, steps: 10, cooldown: 11, shape: 'linear' }, 10),
    /plus cooldown \(11\) is longer than the run/,
  );
  throws(() => parseConfig({ goldfishK: 1 }), /goldfishK: must be 0 \(off\) or at least 2/);
});
