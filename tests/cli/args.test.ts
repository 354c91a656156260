import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { parseTrainArgs } from '../../src/cli/args.ts';
import { parseConfig, PRESETS } from '../../src/train/config.ts';
import { checkResumeOverrides } from '../../src/cli/run_dir.ts';

Deno.test('train flags map to config keys', () => {
  const a = parseTrainArgs([
    '--n-layer',
    '3',
    '--lr=0.002',
    '--no-bias',
    '--preset',
    'nanogpt-cpu',
    '--gpu=dawn',
    '--out',
    'runs/x',
    '--resume',
  ]);
  deepStrictEqual(a.overrides, { nLayer: 3, lr: 0.002, bias: false });
  equal(a.preset, 'nanogpt-cpu');
  equal(a.gpu, 'dawn');
  equal(a.out, 'runs/x');
  equal(a.resume, true);
});

Deno.test('bad flags are one-line errors naming the problem', () => {
  throws(() => parseTrainArgs(['--bogus']), /Unknown option '--bogus'/);
  throws(() => parseTrainArgs(['--steps', 'many']), /--steps expects a number, got 'many'/);
  throws(() => parseTrainArgs(['--preset', 'huge']), /Unknown preset 'huge'; allowed: tiny, nanogpt-cpu/);
  throws(() => parseTrainArgs(['--subgroups', 'yes']), /--subgroups must be on or off, got 'yes'/);
});

Deno.test('impossible configs are rejected with the violated rule', () => {
  throws(() => parseConfig({ nEmbd: 100, nHead: 3 }), /nEmbd \(100\) must be divisible by nHead \(3\)/);
  throws(() => parseConfig({ nLayer: 0 }), /nLayer: Too small/);
  throws(() => parseConfig({ lr: -1 }), /lr:/);
  throws(() => parseConfig({ colour: 'blue' }), /Unrecognized key/);
  throws(() => parseConfig({ lr: 1e-4, minLr: 1e-3 }), /minLr .* must not exceed lr/);
});

Deno.test("nanogpt-cpu preset is nanoGPT's CPU Shakespeare config", () => {
  const c = parseConfig(PRESETS['nanogpt-cpu']);
  deepStrictEqual(
    [
      c.nLayer,
      c.nHead,
      c.nEmbd,
      c.blockSize,
      c.bias,
      c.batchSize,
      c.gradAccum,
      c.lr,
      c.steps,
      c.decaySteps,
      c.warmup,
      c.minLr,
      c.weightDecay,
      c.beta1,
      c.beta2,
      c.gradClip,
      c.evalInterval,
      c.logInterval,
    ],
    [4, 4, 128, 64, false, 12, 1, 1e-3, 2000, 2000, 100, 1e-4, 0.1, 0.9, 0.99, 1, 250, 1],
  );
});

Deno.test('recipe short flags: --neftune α and --goldfish k,h; bad values and --resume-step misuse are errors', () => {
  deepStrictEqual(parseTrainArgs(['--neftune', '5', '--goldfish', '4,13']).overrides, {
    neftuneAlpha: 5,
    goldfishK: 4,
    goldfishH: 13,
  });
  deepStrictEqual(parseTrainArgs(['--goldfish=3']).overrides, { goldfishK: 3 });
  throws(() => parseTrainArgs(['--goldfish', '4;13']), /--goldfish expects k or k,h/);
  throws(() => parseTrainArgs(['--neftune', 'lots']), /--neftune expects the noise α/);
  throws(
    () => parseConfig(parseTrainArgs(['--goldfish', '1']).overrides),
    /goldfishK: must be 0 \(off\) or at least 2/,
  );
  throws(() => parseConfig(parseTrainArgs(['--neftune=-1']).overrides), /neftuneAlpha/);
  throws(() => parseTrainArgs(['--resume-step', '4']), /--resume-step .* needs --resume/);
  equal(parseTrainArgs(['--resume', '--out', 'x', '--resume-step', '8']).resumeStep, 8);
});

Deno.test('--resume refuses only flags that change the saved config, naming the flag, saved and given value', () => {
  const saved = parseConfig({ nLayer: 1, seed: 7, steps: 60 });
  throws(
    () => checkResumeOverrides({ overrides: { nLayer: 2, batchSize: 16, seed: 8, steps: 9 } }, saved),
    /these flags would change it: --n-layer 2 \(saved 1\), --seed 8 \(saved 7\) \(a resume may change: --steps, --log-interval, /,
  );
  // The run's own values repeated (the same command with --resume appended), and resumable changes.
  checkResumeOverrides({ overrides: { nLayer: 1, seed: 7, batchSize: 16, arch: 'gpt', steps: 90, lr: 1e-3 } }, saved);
  checkResumeOverrides(
    { overrides: { steps: 90 }, configFile: 'c.json', file: { nLayer: 1, seed: 7, steps: 60 } },
    saved,
  );
  throws(
    () => checkResumeOverrides({ overrides: {}, configFile: 'c.json', file: { arch: 'mamba' } }, saved),
    /would change it: --config c\.json arch 'mamba' \(saved 'gpt'\)/,
  );
  // A flag wins over the file, as in a fresh run: the file's change is overridden by the saved value.
  checkResumeOverrides({ overrides: { seed: 7 }, configFile: 'c.json', file: { seed: 8 } }, saved);
});
