/**
 * Learning-rate schedules as pure functions of the step (0-based optimizer step), so a
 * resumed run, the preview CLI and the tests all see the same numbers.
 */
import type { TrainConfig } from './config.ts';

/**
 * Linear warmup from 0 to `lr` over `warmup` steps, then cosine decay to `minLr` at
 * `decaySteps`, constant after (nanoGPT get_lr; Loshchilov & Hutter arXiv 1608.03983).
 * Step counts from 0; warmup reaches lr·(step+1)/(warmup+1) as nanoGPT does.
 */
export function cosineWithWarmup(
  step: number,
  o: { lr: number; minLr: number; warmup: number; decaySteps: number },
): number {
  if (step < o.warmup) return (o.lr * (step + 1)) / (o.warmup + 1);
  if (step > o.decaySteps) return o.minLr;
  const ratio = o.decaySteps === o.warmup ? 1 : (step - o.warmup) / (o.decaySteps - o.warmup);
  const coeff = 0.5 * (1 + Math.cos(Math.PI * ratio));
  return o.minLr + coeff * (o.lr - o.minLr);
}

/** Shape of a cooldown: linear, or 1−sqrt (Hägele et al. arXiv 2405.18392 §3: lower final loss). */
export type CooldownShape = 'linear' | 'sqrt';

/** One schedule and its parameters; `lrAt` evaluates it. Step counts are optimizer steps. */
export type ScheduleSpec =
  | { kind: 'cosine'; lr: number; minLr: number; warmup: number; decaySteps: number }
  | { kind: 'wsd'; lr: number; minLr: number; warmup: number; steps: number; cooldown: number; shape: CooldownShape }
  | {
    kind: 'constant';
    lr: number;
    minLr: number;
    warmup: number;
    steps: number;
    cooldown: number;
    shape: CooldownShape;
  }
  | { kind: 'inverse-sqrt'; lr: number; warmup: number }
  | { kind: 'rewarm-cosine'; start: number; startLr: number; lr: number; minLr: number; warmup: number; decay: number };

/** A schedule's name, as the `schedule` config key and `--schedule` flag spell it. */
export type ScheduleKind = ScheduleSpec['kind'];
/** Every schedule name (the config schema's enum). */
export const SCHEDULE_KINDS = ['cosine', 'wsd', 'constant', 'inverse-sqrt', 'rewarm-cosine'] as const;

/** nanoGPT's warmup ramp (shared so every schedule with warmup starts the same way). */
const warm = (step: number, lr: number, warmup: number) => (lr * (step + 1)) / (warmup + 1);

/** Cooldown from `lr` at progress p = 0 to `minLr` at p = 1. */
function cool(p: number, lr: number, minLr: number, shape: CooldownShape): number {
  const q = Math.min(1, Math.max(0, p));
  return minLr + (lr - minLr) * (shape === 'sqrt' ? 1 - Math.sqrt(q) : 1 - q);
}

/**
 * Warmup–stable–decay (Hu et al., MiniCPM, arXiv 2404.06395; Hägele et al. arXiv 2405.18392):
 * warmup as nanoGPT, `lr` held constant, then a cooldown over the last `cooldown` steps that
 * reaches `minLr` at step `steps` (the step after the last one trained, as cosine does).
 */
export function warmupStableDecay(
  step: number,
  o: { lr: number; minLr: number; warmup: number; steps: number; cooldown: number; shape: CooldownShape },
): number {
  if (step < o.warmup) return warm(step, o.lr, o.warmup);
  const begin = o.steps - o.cooldown;
  if (step <= begin || o.cooldown === 0) return o.lr;
  return cool((step - begin) / o.cooldown, o.lr, o.minLr, o.shape);
}

/**
 * Constant LR after nanoGPT's linear warmup (`warmup` = 0: constant from step 0), with an
 * optional cooldown over the last `cooldown` steps — the "constant + cooldown" alternative to
 * cosine of Hägele et al. arXiv 2405.18392 (Zhai et al. arXiv 2106.04560 used it for ViT
 * scaling). `cooldown = 0` keeps it flat; with both set it is the same curve as WSD.
 */
export function constantCooldown(
  step: number,
  o: { lr: number; minLr: number; warmup: number; steps: number; cooldown: number; shape: CooldownShape },
): number {
  return warmupStableDecay(step, o);
}

/**
 * Inverse square root (Vaswani et al. arXiv 1706.03762 §5.3; T5, Raffel et al. arXiv
 * 1910.10683): nanoGPT's linear warmup to `lr` at step `warmup`, then lr·√(warmup/step), so
 * the peak is `lr` rather than Vaswani's d_model^−0.5 scale. With no warmup the first step
 * is held at `lr` (T5 holds it for 10⁴ steps) to avoid dividing by zero.
 */
export function inverseSqrt(step: number, o: { lr: number; warmup: number }): number {
  if (step < o.warmup) return warm(step, o.lr, o.warmup);
  const w = Math.max(1, o.warmup);
  return o.lr * Math.sqrt(w / Math.max(w, step));
}

/**
 * Re-warming and re-decaying for continual pre-training (Gupta et al. arXiv 2308.04014;
 * Ibrahim et al. arXiv 2403.08763): from the checkpoint's step `start`, where the old run's LR
 * was `startLr` (or 0 to re-warm from zero), rise linearly to `lr` over `warmup` steps, then
 * cosine-decay to `minLr` over `decay` steps, constant after. Before `start` it returns
 * `startLr` (those steps belong to the previous schedule, which this one does not know).
 */
export function rewarmCosine(
  step: number,
  o: { start: number; startLr: number; lr: number; minLr: number; warmup: number; decay: number },
): number {
  const s = step - o.start;
  if (s <= 0) return o.startLr;
  if (s < o.warmup) return o.startLr + ((o.lr - o.startLr) * s) / o.warmup;
  const d = s - o.warmup;
  if (d >= o.decay) return o.minLr;
  return o.minLr + 0.5 * (1 + Math.cos((Math.PI * d) / o.decay)) * (o.lr - o.minLr);
}

/** The learning rate of `spec` at `step` (0-based). */
export function lrAt(spec: ScheduleSpec, step: number): number {
  switch (spec.kind) {
    case 'cosine':
      return cosineWithWarmup(step, spec);
    case 'wsd':
      return warmupStableDecay(step, spec);
    case 'constant':
      return constantCooldown(step, spec);
    case 'inverse-sqrt':
      return inverseSqrt(step, spec);
    case 'rewarm-cosine':
      return rewarmCosine(step, spec);
  }
}

/**
 * Checks that `spec` is possible for a run of `steps` steps.
 * @throws Error naming the config keys (`Invalid schedule: …`) when a phase does not fit.
 */
export function validateSchedule(spec: ScheduleSpec, steps: number): void {
  const bad = (msg: string) => {
    throw new Error(`Invalid schedule '${spec.kind}': ${msg}`);
  };
  if ('minLr' in spec && spec.minLr > spec.lr) bad(`minLr (${spec.minLr}) must not exceed lr (${spec.lr})`);
  switch (spec.kind) {
    case 'wsd':
      if (spec.warmup + spec.cooldown > spec.steps) {
        bad(
          `warmup (${spec.warmup}) plus cooldown (${spec.cooldown} steps = cooldownFrac × steps) is longer than the run (${spec.steps} steps); lower --warmup or --cooldown-frac, or raise --steps`,
        );
      }
      break;
    case 'constant':
      if (spec.warmup + spec.cooldown > spec.steps) {
        bad(
          `warmup (${spec.warmup}) plus cooldown (${spec.cooldown}) is longer than the run (${spec.steps} steps); lower --warmup or --cooldown-frac, or raise --steps`,
        );
      }
      break;
    case 'rewarm-cosine':
      if (spec.start > steps) {
        bad(`rewarmStart (${spec.start}) is after the end of the run (${steps} steps); raise --steps`);
      }
      if (spec.decay < 0) {
        bad(
          `the re-warm (from step ${spec.start}, ${spec.warmup} warmup steps) ends after the decay end (step ${
            spec.start + spec.warmup + spec.decay
          }); raise --steps or --decay-steps, or lower --warmup`,
        );
      }
      if (spec.startLr > spec.lr) bad(`rewarmFrom (${spec.startLr}) must not exceed lr (${spec.lr})`);
      break;
  }
}

/** Config keys a schedule reads (so tools can build one without a whole TrainConfig). */
export type ScheduleConfig = Pick<
  TrainConfig,
  | 'schedule'
  | 'lr'
  | 'minLr'
  | 'warmup'
  | 'decaySteps'
  | 'steps'
  | 'cooldownFrac'
  | 'cooldownShape'
  | 'rewarmStart'
  | 'rewarmFrom'
>;

/**
 * The schedule a config describes. An unresolved re-warm (`rewarmStart` or `rewarmFrom` = −1,
 * filled in from the checkpoint by the train CLI on --resume) starts at step 0 from LR 0.
 */
export function scheduleFromConfig(c: ScheduleConfig): ScheduleSpec {
  const cooldown = Math.round(c.cooldownFrac * c.steps);
  switch (c.schedule) {
    case 'cosine':
      return { kind: 'cosine', lr: c.lr, minLr: c.minLr, warmup: c.warmup, decaySteps: c.decaySteps || c.steps };
    case 'wsd':
      return {
        kind: 'wsd',
        lr: c.lr,
        minLr: c.minLr,
        warmup: c.warmup,
        steps: c.steps,
        cooldown,
        shape: c.cooldownShape,
      };
    case 'constant':
      return {
        kind: 'constant',
        lr: c.lr,
        minLr: c.minLr,
        warmup: c.warmup,
        steps: c.steps,
        cooldown,
        shape: c.cooldownShape,
      };
    case 'inverse-sqrt':
      return { kind: 'inverse-sqrt', lr: c.lr, warmup: c.warmup };
    case 'rewarm-cosine': {
      const start = Math.max(0, c.rewarmStart);
      const end = c.decaySteps || c.steps;
      return {
        kind: 'rewarm-cosine',
        start,
        startLr: Math.max(0, c.rewarmFrom),
        lr: c.lr,
        minLr: c.minLr,
        warmup: c.warmup,
        decay: end - start - c.warmup,
      };
    }
  }
}

/** The steps where `spec` changes phase (for previews and continuity tests). */
export function phaseBoundaries(spec: ScheduleSpec): number[] {
  switch (spec.kind) {
    case 'cosine':
      return [spec.warmup, spec.decaySteps];
    case 'wsd':
      return [spec.warmup, spec.steps - spec.cooldown, spec.steps];
    case 'constant':
      return [spec.warmup, spec.steps - spec.cooldown, spec.steps];
    case 'inverse-sqrt':
      return [spec.warmup];
    case 'rewarm-cosine':
      return [spec.start, spec.start + spec.warmup, spec.start + spec.warmup + spec.decay];
  }
}
