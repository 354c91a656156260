/** `npm run plan` in a subprocess: the tables it prints agree with cost.ts; bad plans are one `error:` line naming the rule. */
import { doesNotMatch, equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { stepTraffic } from '../../src/parallel/cost/cost.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { activationMemory } from '../../src/perf/activation_memory.ts';
import { parseConfig, PRESETS } from '../../src/train/config.ts';

function oneLineError(r: { code: number; stderr: string }, pattern: RegExp): void {
  ok(r.code !== 0, `non-zero exit (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
  equal(lines.length, 1, `one error line, got: ${r.stderr}`);
  match(lines[0], pattern);
}

const num = (s: string) => Number(s.replace(/,/g, ''));
/** Bytes of a `12.3 KiB` / `1.20 MiB` cell. */
const bytes = (s: string) => {
  const m = /^([\d.]+) (B|KiB|MiB|GiB)$/.exec(s);
  ok(m, `a byte count, got '${s}'`);
  return Number(m[1]) * { B: 1, KiB: 1024, MiB: 2 ** 20, GiB: 2 ** 30 }[m[2] as 'B'];
};

Deno.test({
  name: 'plan CLI: dp2×tp2×pp2 prints plan, memory, traffic per dimension, bubble and timeline',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('plan.ts', [
      '--dp',
      '2',
      '--tp',
      '2',
      '--pp',
      '2',
      '--micro-batches',
      '4',
      '--preset',
      'tiny',
      '--vocab-size',
      '65',
      '--net',
      'pcie-eth',
    ]);
    equal(r.code, 0, r.stderr);
    match(
      r.stdout,
      /^plan {5}dp 2 · pp 2 · cp 1 · tp 2 · ep 1 · zero 0 · sp off · 1f1b × 4 micro-batches \(8 ranks\)$/m,
    );
    match(r.stdout, /vocab 65 \(padded to 66\)/);
    match(r.stdout, /network {2}intra=16GB\/s,5us;inter=1.25GB\/s,50us;node=4/);
    const rows = (head: RegExp) => {
      const lines = r.stdout.split('\n'), i = lines.findIndex((l) => head.test(l));
      ok(i >= 0, `table ${head}`);
      const out: string[][] = [];
      for (let j = i + 1; j < lines.length && /^\d+\s/.test(lines[j]); j++) out.push(lines[j].trim().split(/\s{2,}/));
      return out;
    };
    const mem = rows(/^rank\s+dp\s+pp\s+cp\s+tp\s+elements\s+params/);
    equal(mem.length, 8);
    match(
      r.stdout,
      /^rank\s+dp\s+pp\s+cp\s+tp\s+elements\s+params\s+grads\s+optimizer\s+total\s+activations\s+in flight\s+total \+ act\.$/m,
    );
    match(
      r.stdout,
      /^ {2}rank 0 \(mesh trainer\): [\d.]+ KiB per micro-batch, [\d.]+ KiB per layer — Korthikanti et al\. \(arXiv 2205\.05198\) fp16 sbh\(10 \+ 24\/t \+ 5as\/\(ht\)\)/m,
    );
    const traffic = rows(/^rank\s+dp\s+tp\s+pp\s+cp\s+ep\s+total/);
    equal(traffic.length, 8);
    const model = { nLayer: 2, nHead: 2, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };
    const plan = makePlan({ dp: 2, tp: 2, pp: 2, microBatches: 4 });
    for (let rank = 0; rank < 8; rank++) {
      // dp × tp × pp runs on the mesh trainer: its [norm, loss] sum over the world replaces the dp loss average.
      const t = stepTraffic(plan, model, rank, { trainer: 'mesh' }),
        sum = (d: string) => t.filter((x) => x.dim === d).reduce((a, x) => a + x.elements, 0);
      equal(num(traffic[rank][1]), sum('dp'), `rank ${rank} dp`);
      equal(num(traffic[rank][2]), sum('tp'), `rank ${rank} tp`);
      equal(num(traffic[rank][3]), sum('pp'), `rank ${rank} pp`);
    }
    for (let rank = 0; rank < 8; rank++) {
      // The activation column is activation_memory.ts's peak (1F1B: 2 micro-batches on the first stage, 1 on the last).
      const a = await activationMemory(
        parseConfig(PRESETS.tiny),
        makePlan({ dp: 2, tp: 2, pp: 2, microBatches: 4 }),
        65,
        rank,
      );
      equal(mem[rank][11], String(a.inFlight), `rank ${rank} in flight`);
      equal(a.inFlight, rank % 4 < 2 ? 2 : 1);
      ok(
        Math.abs(bytes(mem[rank][10]) - a.bytes) <= 0.005 * 2 ** 20,
        `rank ${rank} activations ${mem[rank][10]} vs ${a.bytes}`,
      );
    }
    match(r.stdout, /pipeline 1f1b: p 2, m 4 · bubble formula \(p−1\)\/\(v·m\+p−1\) = 20\.0% · dry run 2\d\.\d% idle/);
    match(r.stdout, /peak in-flight activations per pipeline rank: 2, 1 \(micro-batches\)/);
    const chart = r.stdout.split('\n').filter((l) => /^ {2}stage rank \d/.test(l));
    equal(chart.length, 2);
    for (const c of chart) match(c, /\|[a-dA-D.~]{64}\|$/);
    ok(!/measured/i.test(r.stdout), 'no measured numbers are printed');
  },
});

Deno.test({
  name: 'plan CLI: --schedule gpipe is the pipeline schedule; ZeRO-3 shards memory',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('plan.ts', [
      '--pp',
      '2',
      '--schedule=gpipe',
      '--micro-batches',
      '2',
      '--dp',
      '2',
      '--zero',
      '3',
      '--vocab-size',
      '65',
      '--width',
      '40',
    ]);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /pipeline gpipe: p 2, m 2 · bubble formula .* = 33\.3%/);
    match(r.stdout, /peak in-flight activations per pipeline rank: 2, 2/);
    match(r.stdout, /ZeRO-3 over dp·cp = 2/);
    // ZeRO-3's gathers, per unit and exact: the rows are counted from the model's own step (no formula's ≈).
    match(r.stdout, /^dp\s+parameters \(ZeRO\)\s+allGather\s+ring\s+\[0,2\]\s+4\s/m);
    doesNotMatch(r.stdout, /allGather .*≈/);
    for (const c of r.stdout.split('\n').filter((l) => /^ {2}stage rank/.test(l))) match(c, /\|.{40}\|$/);
  },
});

Deno.test({
  name: 'plan CLI: invalid plans and flags are one error line naming the rule',
  sanitizeResources: false,
  fn: async () => {
    oneLineError(
      await runCli('plan.ts', ['--tp', '3', '--vocab-size', '65']),
      /^error: invalid parallel plan: nEmbd 64 is not divisible by tp 3; heads 2 not divisible by tp 3$/,
    );
    oneLineError(
      await runCli('plan.ts', ['--dp', '2', '--micro-batches', '3', '--vocab-size', '65']),
      /batch 16 not divisible by micro-batches × dp \(3 × 2\)/,
    );
    oneLineError(
      await runCli('plan.ts', ['--sp', '--cp', '3', '--vocab-size', '65']),
      /sequence parallel \(sp\) requires tp > 1; sequence 64 not divisible by cp·2 = 6 for zig-zag ring attention/,
    );
    oneLineError(
      await runCli('plan.ts', ['--pp-schedule', 'zigzag']),
      /--pp-schedule must be one of gpipe, 1f1b, interleaved, zb-h1, got 'zigzag'/,
    );
    oneLineError(await runCli('plan.ts', ['--dp', 'two']), /--dp expects an integer ≥ 1, got 'two'/);
  },
});

Deno.test('measuredComparison puts measured counts beside the prediction, keyed dim/collective', async () => {
  const { measuredComparison } = await import('../../src/perf/plan_report.ts');
  const model = { nLayer: 2, nHead: 2, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };
  const rows = stepTraffic(makePlan({ dp: 2 }), model, 0);
  const predicted = rows.filter((x) => x.collective === 'allReduce').reduce((a, x) => a + x.elements, 0);
  const text = measuredComparison(rows, { 'dp/allReduce': predicted + 3 });
  const line = text.split('\n').find((l) => l.startsWith('dp/allReduce'))!;
  deepEqualCells(line, [
    'dp/allReduce',
    predicted.toLocaleString('en-US'),
    (predicted + 3).toLocaleString('en-US'),
    '3',
  ]);
});

function deepEqualCells(line: string, want: string[]): void {
  equal(line.trim().split(/\s{2,}/).join('|'), want.join('|'));
}

Deno.test({
  name: 'plan CLI: mamba and a MoE architecture get the activation figure counted from their model',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('plan.ts', ['--arch', 'mamba', '--vocab-size', '65']);
    equal(r.code, 0, r.stderr);
    match(r.stdout, /^ {2}activations: peak of the tensors .* over a meta GPU \(fp32; mamba; /m);
    match(r.stdout, /per layer \(Korthikanti et al\.'s transformer count is for the GPT layer\)$/m);
    // The MoE models were refused by the hand-kept count; their routed experts' fixed-capacity buffers are counted now.
    const moe = await runCli('plan.ts', ['--arch', 'gpt-moe', '--vocab-size', '65']);
    equal(moe.code, 0, moe.stderr);
    const row = moe.stdout.split('\n').find((l) => /^0 /.test(l) && / 1 +[\d.]+ \w+$/.test(l));
    ok(row, `rank 0's memory row in:\n${moe.stdout}`);
    const cells = row.trim().split(/\s{2,}/),
      want = await activationMemory(parseConfig({ arch: 'gpt-moe' }), makePlan(), 65, 0);
    ok(Math.abs(bytes(cells[10]) - want.bytes) <= 0.005 * 2 ** 20, `activations ${cells[10]} vs ${want.bytes}`);
  },
});

Deno.test({
  name: 'plan CLI --measure: predicted activations beside the measured pool peak, which holds more (ratio ≥ 1)',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const r = await runCli('plan.ts', [
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
      '--measure',
    ]);
    equal(r.code, 0, r.stderr);
    const row = r.stdout.split('\n').find((l) => /^0 +[\d.]+ \w+ +[\d.]+ \w+ +[\d.]+ \w+ +[\d.]+×$/.test(l));
    ok(row, `a comparison row for rank 0 in:\n${r.stdout}`);
    const [, predicted, , measured, ratio] = row.trim().split(/\s{2,}/);
    const cfg = parseConfig({ nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4 });
    ok(
      Math.abs(bytes(predicted) - (await activationMemory(cfg, makePlan(), 65, 0)).bytes) <= 0.05 * 1024,
      `${predicted}`,
    );
    ok(bytes(measured) >= bytes(predicted), `measured ${measured} ≥ predicted ${predicted}`);
    ok(Math.abs(Number(ratio.slice(0, -1)) - bytes(measured) / bytes(predicted)) < 0.01, ratio);
  },
});
