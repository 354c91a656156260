/**
 * `npm run scale -- --quick` in a subprocess, as CI runs it: the JSON it writes is consistent
 * with itself (rates from times, MFU from the peak, tokens/s from ms/step), the tables print
 * the PyTorch ratios a baseline file gives, and bad input is one clear line.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { testBackend } from '../util/gpu.ts';
import { attentionFlops } from '../../src/bench/scale.ts';
import { DEVICE_PEAKS, peakTflops } from '../../src/perf/devices.ts';
import { parseScaleArgs } from '../../src/cli/scale.ts';
import { TORCH_BASELINE } from '../util/torch_baseline.ts';

const close = (a: number, b: number, rel = 1e-9) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b));

Deno.test({
  name: 'scale CLI --quick: self-consistent JSON, MFU against the named peak, PyTorch ratios from the baseline',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      await Deno.writeTextFile(`${dir}/torch.json`, JSON.stringify(TORCH_BASELINE));
      const r = await runCli('scale.ts', [
        '--quick',
        '--device',
        'h100-sxm',
        '--json',
        `${dir}/scale.json`,
        '--baseline',
        `${dir}/torch.json`,
      ]);
      equal(r.code, 0, r.stderr);
      const j = JSON.parse(await Deno.readTextFile(`${dir}/scale.json`));
      equal(j.peakTflops, DEVICE_PEAKS['h100-sxm'].f32);
      equal(j.quick, true);
      // On Deno's wgpu (lavapipe in CI) the f16 columns must be measured, not quietly left empty (tests/util/gpu.ts hasShaderF16).
      if (testBackend() === 'wgpu') ok(j.features.includes('shader-f16'), `wgpu adapter features: ${j.features}`);
      equal(j.matmul.map((m: { n: number }) => m.n).join(), '64,128');
      for (const m of j.matmul) {
        ok(close(m.gflops, (2 * m.n ** 3) / (m.ms * 1e6)), `GFLOP/s from ms at ${m.n}`);
        for (const k of ['tile64Gflops', 'tile128Gflops', 'plainGflops']) ok(m[k] > 0, `${k} at ${m.n}`);
        // f16 operands are timed exactly where the adapter has shader-f16 (lavapipe has it, SwiftShader not).
        ok(j.features.includes('shader-f16') ? m.f16Gflops > 0 : m.f16Gflops === null, `f16 column: ${m.f16Gflops}`);
        // Subgroup variants on and off are both timed exactly where the adapter has subgroups; the
        // shipped setting (off unless --subgroups on) is the shipped timing.
        const sg = j.features.includes('subgroups');
        for (const k of ['subgroupGflops', 'noSubgroupGflops']) ok(sg ? m[k] > 0 : m[k] === null, `${k}: ${m[k]}`);
        if (sg) equal(j.subgroups ? m.subgroupGflops : m.noSubgroupGflops, m.gflops);
      }
      equal(j.attention.length, 2);
      for (const a of j.attention) {
        ok(a.ms > 0, `attention T=${a.t} timed`);
        ok(close(a.tflops, attentionFlops(a.b, a.nh, a.t, a.hs) / (a.ms * 1e9)), `TFLOP/s from ms at T=${a.t}`);
        ok(j.features.includes('shader-f16') ? a.f16Ms > 0 : a.f16Ms === null, `f16 q, k, v at T=${a.t}`);
        for (const k of ['subgroupMs', 'noSubgroupMs']) {
          ok(j.features.includes('subgroups') ? a[k] > 0 : a[k] === null, `${k} at T=${a.t}: ${a[k]}`);
        }
      }
      const t = j.train;
      equal(t.tokensPerStep, 2 * 64);
      ok(close(t.tokensPerSec, (t.tokensPerStep * 1000) / t.msPerStep), 'tokens/s from ms/step');
      ok(close(t.mfu, t.tflops / 67), 'MFU = achieved / the profile peak');
      ok(t.peakBytes > 0 && t.params > 0);
      equal(t.precision, 'f32');
      equal(t.subgroups, j.subgroups);
      // The step's variants: f16-mixed where shader-f16 exists, the subgroup fallback where subgroups do.
      const want = [
        ...(j.features.includes('shader-f16') ? ['f16-mixed:f16-mixed:' + t.subgroups] : []),
        ...(j.features.includes('subgroups') ? [j.subgroups ? 'no subgroups:f32:false' : 'subgroups:f32:true'] : []),
      ];
      type Variant = { variant: string; precision: string; subgroups: boolean; tokensPerSec: number };
      equal(j.trainVariants.map((v: Variant) => `${v.variant}:${v.precision}:${v.subgroups}`).join(), want.join());
      for (const v of j.trainVariants) ok(v.tokensPerSec > 0 && v.params === t.params, `${v.variant} measured`);
      // The ratio columns: ours over the baseline where it measured, '–' where it did not.
      const row64 = r.stdout.split('\n').find((l) => /^64 /.test(l) && l.includes('52.4'));
      ok(row64, `a matmul row for 64 with the baseline's GFLOP/s:\n${r.stdout}`);
      match(row64, new RegExp(`${(j.matmul[0].gflops / 52.4288).toFixed(2)}×\\s*$`));
      match(r.stdout.split('\n').find((l) => /^128 /.test(l))!, /–\s*$/);
      const eager = r.stdout.split('\n').find((l) => l.startsWith('PyTorch f32 eager'));
      ok(eager, r.stdout);
      match(eager, /32000\s+4\.00\s+2\s+\S+×$/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test('scale CLI: bad flags and a baseline that is not torch_baseline.py output are one clear line', async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/bad.json`, JSON.stringify({ device: 'x', matmul: 'no' }));
    const cases: [string[], RegExp][] = [
      [['--batch', '0'], /--batch must be an integer ≥ 1, got '0'/],
      [['--device', 'tpu'], /unknown --device 'tpu'; allowed: h100-sxm, h200, a100-80g, mi250x/],
      [['--peak-tflops=-1'], /--peak-tflops must be a number > 0, got '-1'/],
      [['--gpu', 'metal'], /--gpu must be auto, wgpu or dawn/],
      [['--subgroups', 'yes'], /--subgroups must be on or off, got 'yes'/],
      [['--sizes', '1'], /Unknown option '--sizes'/],
      [['--baseline', `${dir}/bad.json`], /not a torch_baseline\.py result: torch: .*matmul: /],
    ];
    for (const [args, want] of cases) {
      const r = await runCli('scale.ts', ['--quick', ...args]);
      equal(r.code, 2, `${args.join(' ')}: exit 2`);
      match(r.stderr.trim(), want);
      equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test('scale: --peak-tflops overrides --device; attention FLOPs count the causal half and 2.5× backward', () => {
  equal(peakTflops(100, 'h100-sxm'), 100);
  equal(peakTflops(undefined, 'a100-80g'), 19.5);
  equal(peakTflops(undefined, undefined), 0);
  equal(parseScaleArgs(['--device', 'h200']).peakTflops, 67);
  // Forward 4·b·nh·T²·hs halved by the mask = 2·b·nh·T²·hs; total 3.5× that.
  equal(attentionFlops(2, 3, 5, 7), 3.5 * 2 * 2 * 3 * 25 * 7);
});
