import { equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { lrAt, scheduleFromConfig } from '../../src/train/schedules.ts';
import { parseConfig } from '../../src/train/config.ts';

Deno.test({
  name: 'schedule CLI: table, ASCII plot and SVG; bad schedules are one-line errors',
  sanitizeResources: false,
  fn: async () => {
    const svg = `${await Deno.makeTempDir()}/lr.svg`;
    const r = await runCli('schedule.ts', [
      '--schedule',
      'wsd',
      '--steps',
      '1000',
      '--warmup',
      '100',
      '--cooldown-frac',
      '0.2',
      '--lr',
      '1e-3',
      '--min-lr',
      '1e-5',
      '--svg',
      svg,
    ]);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /schedule wsd .*run of 1000 steps/);
    match(r.stdout, /phase changes at steps 100, 800, 1000/);
    match(r.stdout, /^\s+100 {2}1\.000e-3$/m);
    const rows = r.stdout.split('\n').filter((l) => /^\s+\d+ {2}\d\.\d{3}e-\d$/.test(l));
    ok(rows.length >= 20 && rows.length <= 24, `about 20 table rows, got ${rows.length}`);
    match(r.stdout, /\|\s*\*+/, 'an ASCII plot');
    const chart = await Deno.readTextFile(svg);
    match(chart, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    match(chart, /<polyline points="[\d.,\s]+"/);
    match(chart, /<\/svg>\n$/);

    const bad = await runCli('schedule.ts', ['--schedule', 'wsd', '--steps', '100', '--warmup', '90']);
    equal(bad.code, 1);
    match(bad.stderr.trim(), /^error: Invalid schedule 'wsd': warmup \(90\) plus cooldown \(20 steps/);
  },
});

const SMALL = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '8',
  '--batch-size',
  '2',
  '--log-interval',
  '1',
  '--eval-interval',
  '1000',
  '--eval-batches',
  '1',
  '--sample-tokens',
  '0',
];

async function lrs(dir: string): Promise<Map<number, number>> {
  const m = new Map<number, number>();
  for (const line of (await Deno.readTextFile(`${dir}/metrics.jsonl`)).split('\n')) {
    if (line.trim() && typeof JSON.parse(line).lr === 'number') m.set(JSON.parse(line).step, JSON.parse(line).lr);
  }
  return m;
}

Deno.test({
  name: 'train CLI: --schedule wsd with goldfish runs; a resumed run re-warms from its checkpoint',
  sanitizeResources: false,
  fn: async () => {
    const a = await Deno.makeTempDir();
    const wsd = await runCli('train.ts', [
      ...SMALL,
      '--steps',
      '20',
      '--warmup',
      '4',
      '--schedule',
      'wsd',
      '--cooldown-frac',
      '0.25',
      '--goldfish-k',
      '4',
      '--out',
      a,
    ]);
    equal(wsd.code, 0, wsd.stderr);
    const cfgA = parseConfig({ steps: 20, warmup: 4, schedule: 'wsd', cooldownFrac: 0.25 });
    for (const [s, lr] of await lrs(a)) ok(Math.abs(lr - lrAt(scheduleFromConfig(cfgA), s)) < 1e-12, `wsd lr at ${s}`);

    // Continual pre-training: a finished 20-step cosine run continued to 40 steps with a re-warm.
    const b = await Deno.makeTempDir();
    equal((await runCli('train.ts', [...SMALL, '--steps', '20', '--warmup', '2', '--out', b])).code, 0);
    const old = scheduleFromConfig(parseConfig({ steps: 20, warmup: 2 }));
    const more = await runCli('train.ts', [
      '--out',
      b,
      '--resume',
      '--steps',
      '40',
      '--schedule',
      'rewarm-cosine',
      '--warmup',
      '5',
      '--lr',
      '2e-3',
    ]);
    equal(more.code, 0, more.stderr);
    const saved = JSON.parse(await Deno.readTextFile(`${b}/config.json`));
    equal(saved.rewarmStart, 20, 'the re-warm starts at the checkpoint step');
    equal(saved.rewarmFrom, lrAt(old, 20), "from the old run's LR there");
    const got = await lrs(b);
    equal(got.size, 40);
    equal(got.get(20), lrAt(old, 20));
    ok(Math.abs(got.get(25)! - 2e-3) < 1e-12, 'peak after the re-warm');
    ok(got.get(39)! < got.get(30)!, 'decays again');
  },
});
