/**
 * `npm run train -- --dp 2 …` / `--pp 2 …` in a subprocess, as a user runs it: the run
 * directory holds metrics.jsonl (a line per step), trace.json (spans of every rank with the
 * strategy's ops), config.json with the plan, and the accounting whose measured elements per
 * collective equal the analytical prediction on every exact row; a bad plan is one `error:`
 * line naming every broken rule, before any worker starts; `npm run plan -- --measure` prints
 * one measured step beside the prediction; a run checkpoints every rank and `--resume`
 * continues it exactly, refusing other parallel flags or a damaged file without touching it.
 */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { type ChromeTrace, validateChromeTrace } from '../../src/comm/trace.ts';

const TINY = [
  '--n-layer',
  '2',
  '--n-head',
  '2',
  '--n-embd',
  '32',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--steps',
  '3',
  '--log-interval',
  '1',
  '--eval-batches',
  '2',
  '--lr',
  '1e-2',
  '--warmup',
  '0',
];
const TEST = { sanitizeResources: false, sanitizeOps: false };

interface Accounting {
  plan: { dp: number; pp: number };
  ranks: {
    rank: number;
    kind: string;
    traffic: { key: string; predicted: number; measured: number; exact: boolean }[];
    memory: { measured: { params: number; optimizer: number; peakPool: number } };
  }[];
}

/** Runs the CLI into a fresh directory and checks what every parallel run must leave behind; returns the parsed files. */
async function trainRun(
  script: string,
  flags: string[],
): Promise<{ stdout: string; trace: ChromeTrace; acc: Accounting; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: 'train-parallel-' });
  const r = await runCli(script, [...flags, ...TINY, '--out', dir]);
  equal(r.code, 0, `exit 0\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  match(r.stdout, /checkpoint: 2 rank files in .*ckpt-parallel-3\//);
  const manifest = JSON.parse(await Deno.readTextFile(`${dir}/ckpt-parallel.json`));
  equal(manifest.step, 3);
  deepStrictEqual(manifest.files, ['rank-0.safetensors', 'rank-1.safetensors']);
  const lines = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
  const steps = lines.filter((l) => typeof l.loss === 'number');
  deepStrictEqual(steps.map((l) => l.step), [0, 1, 2]);
  ok(steps.every((l) => Number.isFinite(l.loss) && l.loss > 0 && Number.isFinite(l.grad_norm)), JSON.stringify(steps));
  ok(steps[2].loss < steps[0].loss, `loss falls over 3 steps at lr 1e-2: ${steps.map((l) => l.loss)}`);
  ok(
    steps.every((l) => Object.values(l.bytes_by_collective as Record<string, number>).some((b) => b > 0)),
    'bytes per collective in every line',
  );
  const cfg = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
  ok(cfg.plan && cfg.worldSize === 2, `config.json has the plan: ${JSON.stringify(cfg.plan)}`);
  const trace = JSON.parse(await Deno.readTextFile(`${dir}/trace.json`)) as ChromeTrace;
  deepStrictEqual(validateChromeTrace(trace), []);
  const acc = JSON.parse(await Deno.readTextFile(`${dir}/accounting.json`)) as Accounting;
  equal(acc.ranks.length, 2);
  for (const rank of acc.ranks) {
    deepStrictEqual(
      rank.traffic.filter((t) => !t.exact).map((t) => t.key),
      [],
      `rank ${rank.rank}: every predicted row is exact`,
    );
    const exact = rank.traffic.filter((t) => t.exact);
    ok(exact.some((t) => t.measured > 0), `rank ${rank.rank} sent something on an exact row`);
    deepStrictEqual(exact.filter((t) => t.measured !== t.predicted), [], `rank ${rank.rank}: measured = predicted`);
    ok(
      rank.memory.measured.params > 0 && rank.memory.measured.optimizer === 2 * rank.memory.measured.params &&
        rank.memory.measured.peakPool > 0,
    );
  }
  match(
    await Deno.readTextFile(`${dir}/plan.txt`),
    /rank 1: elements per step by dim\/collective — measured = predicted on every exact row/,
  );
  return { stdout: r.stdout, trace, acc, dir };
}

/** Ops of the wall-clock events of rank `tid` of kind `cat`. */
const ops = (t: ChromeTrace, tid: number, cat: string) =>
  new Set(
    t.traceEvents.filter((e) => e.ph === 'X' && e.pid === 0 && e.tid === tid && e.cat === cat).map((e) => e.args?.op),
  );

Deno.test({
  name: 'train --dp 2: 3 steps, val loss from rank 0, allReduce spans on both ranks, dp traffic = prediction',
  ...TEST,
  fn: async () => {
    const { stdout, trace, acc, dir } = await trainRun('train.ts', ['--dp', '2', '--net', 'nvlink-ib']);
    match(stdout, /^step +2 \| val loss \d+\.\d{4}$/m);
    match(stdout, /^step +0 \| loss \d+\.\d{4} \| lr .* ms\/step \| \d+ tokens\/s/m);
    for (const r of [0, 1]) ok(ops(trace, r, 'collective').has('allReduce'), `rank ${r} allReduce span`);
    ok(
      trace.traceEvents.some((e) => e.pid === 1 && e.ph === 'X' && e.cat === 'send' && (e.dur ?? 0) >= 0),
      'simulated-clock events',
    );
    equal(acc.ranks[0].kind, 'mesh', 'data parallelism alone runs on the mesh trainer');
    ok(acc.ranks.every((r) => r.traffic.some((t) => t.key === 'dp/allReduce' && t.exact && t.measured > 15_000)));
    await Deno.remove(dir, { recursive: true });
  },
});

Deno.test({
  name:
    'train --pp 2 --micro-batches 2: send/recv spans on both stages, pp traffic (the 2-element norm/loss sum included) = prediction',
  ...TEST,
  fn: async () => {
    const { trace, acc, dir } = await trainRun('train.ts', ['--pp', '2', '--micro-batches', '2']); // through train.ts's dispatch, as `npm run train` does
    for (const r of [0, 1]) {
      ok(ops(trace, r, 'send').has('send') && ops(trace, r, 'recv').has('send'), `rank ${r} p2p send and recv spans`);
      ok(ops(trace, r, 'collective').has('allReduce'), `rank ${r} allReduce (tied embedding, norm + loss)`);
    }
    // Activations forward from stage 0 and gradients back from stage 1: m·b·T·C = 2·2·16·32 each.
    for (const r of acc.ranks) equal(r.traffic.find((t) => t.key === 'pp/send')?.measured, 2 * 2 * 16 * 32);
    await Deno.remove(dir, { recursive: true });
  },
});

Deno.test({
  name:
    'train --arch gpt-moe --tp 2 --sp: validation between steps and the checkpoint at the end; traffic = prediction',
  ...TEST,
  fn: async () => {
    // Validation after every step: its forward's routings must not reach the next step's load-balancing loss.
    const moe = ['--arch', 'gpt-moe', '--tp', '2', '--sp', '--eval-interval', '1', '--aux-loss-weight', '0.01'];
    const { stdout, acc, dir } = await trainRun('train.ts', moe);
    for (const s of [0, 1, 2]) match(stdout, new RegExp(`^step +${s} \\| val loss \\d+\\.\\d{4}$`, 'm'));
    ok(acc.ranks.every((r) => r.traffic.every((t) => !t.exact || t.measured === t.predicted)), 'every exact row');
    await Deno.remove(dir, { recursive: true });
  },
});

Deno.test({
  name: 'train --tp 3 with 2 heads: one error line naming every broken rule, exit 1, no run directory',
  ...TEST,
  fn: async () => {
    const dir = `${await Deno.makeTempDir({ prefix: 'train-parallel-bad-' })}/run`;
    const r = await runCli('train.ts', ['--tp', '3', ...TINY, '--out', dir]);
    equal(r.code, 1);
    const errs = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
    equal(errs.length, 1, r.stderr);
    match(errs[0], /heads 2 not divisible by tp 3/);
    match(errs[0], /nEmbd 32 is not divisible by tp 3/);
    equal(r.stdout, '', 'nothing started');
    ok(!(await Deno.stat(dir).then(() => true, () => false)), 'no run directory');
  },
});

Deno.test({
  name: 'plan --measure: one real dp 2 step printed beside the prediction, equal on every exact row',
  ...TEST,
  fn: async () => {
    const r = await runCli('plan.ts', ['--dp', '2', ...TINY, '--measure']);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /^measured: one real step on 2 in-process ranks/m);
    for (const rank of [0, 1]) {
      match(
        r.stdout,
        new RegExp(`^rank ${rank}: elements per step by dim/collective — measured = predicted on every exact row`, 'm'),
      );
    }
    match(r.stdout, /^dp\/allReduce +[\d,]+ +[\d,]+ +0 +yes$/m);
  },
});

Deno.test({
  name:
    'train --dp 2 --resume: continues the latest checkpoint set exactly; other flags and a damaged rank file are refused, the set kept',
  ...TEST,
  fn: async () => {
    const flags = (
      steps: number,
    ) => [
      '--dp',
      '2',
      ...TINY.filter((_, i, a) => a[i] !== '--steps' && a[i - 1] !== '--steps'),
      '--steps',
      String(steps),
      '--ckpt-interval',
      '2',
      '--decay-steps',
      '4',
    ];
    // decay-steps fixes the LR schedule, so the 2-step run's first steps are the 4-step run's.
    const losses = async (dir: string) =>
      (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l)).filter((l) =>
        typeof l.loss === 'number'
      );
    const whole = await Deno.makeTempDir({ prefix: 'train-parallel-whole-' }),
      part = await Deno.makeTempDir({ prefix: 'train-parallel-part-' });
    let r = await runCli('train.ts', [...flags(4), '--out', whole]);
    equal(r.code, 0, r.stderr);
    r = await runCli('train.ts', [...flags(2), '--out', part]);
    equal(r.code, 0, r.stderr);
    equal(JSON.parse(await Deno.readTextFile(`${part}/ckpt-parallel.json`)).step, 2);

    // Refusals leave the checkpoint as it was.
    const again = await runCli('train.ts', [...flags(4), '--out', part]);
    equal(again.code, 1);
    match(again.stderr, /already holds a parallel checkpoint: pass --resume/);
    const other = await runCli('train.ts', ['--resume', '--out', part, '--dp', '2', '--zero', '1', '--steps', '4']);
    equal(other.code, 1);
    match(
      other.stderr,
      /--resume: the checkpoint was written by 'dp 2 .*zero 0.*', the flags ask for '.*zero 1.*'; pass the checkpoint's parallel flags/,
    );
    const file = `${part}/ckpt-parallel-2/rank-1.safetensors`, good = await Deno.readFile(file), bad = good.slice();
    bad[bad.length - 1] ^= 0xff;
    await Deno.writeFile(file, bad);
    const damaged = await runCli('train.ts', ['--resume', '--out', part, '--dp', '2', '--steps', '4']);
    equal(damaged.code, 1);
    match(
      damaged.stderr,
      /Corrupt checkpoint .*ckpt-parallel-2\/rank-1\.safetensors: its SHA-256 [0-9a-f]{64} is not the [0-9a-f]{64} that .*ckpt-parallel\.json records for rank 1/,
    );
    deepStrictEqual(await Deno.readFile(file), bad, 'a refused file is left as it was');
    await Deno.writeFile(file, good);

    r = await runCli('train.ts', ['--resume', '--out', part, '--dp', '2', '--steps', '4']);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /resuming at step 2/);
    const [a, b] = [await losses(whole), await losses(part)];
    deepStrictEqual(b.map((l) => l.step), [0, 1, 2, 3], 'metrics.jsonl continues where the checkpoint was');
    for (const s of [2, 3]) {
      ok(
        Math.abs(a[s].loss - b[s].loss) <= 1e-6 * a[s].loss,
        `step ${s}: ${b[s].loss} resumed vs ${a[s].loss} uninterrupted`,
      );
    }
    equal(JSON.parse(await Deno.readTextFile(`${part}/ckpt-parallel.json`)).step, 4);
    ok(!(await Deno.stat(`${part}/ckpt-parallel-2`).then(() => true, () => false)), 'the replaced set is removed');
    for (const d of [whole, part]) await Deno.remove(d, { recursive: true });
  },
});
