/** Device profiles: the named ones, the rate curve's shape, and profiles read from JSON (a profile or npm run bench output). */
import { equal, ok, rejects, throws } from 'node:assert/strict';
import { DEVICE_PEAKS } from '../../src/perf/devices.ts';
import {
  attentionRate,
  DEVICE_PROFILES,
  deviceProfile,
  gemmRate,
  parseDeviceJson,
  peakFlops,
} from '../../src/perf/device_profile.ts';

Deno.test('profiles: every issue-named profile exists with its datasheet peak and the rate stays below it', () => {
  for (const name of ['h100-sxm', 'a100-80g', 'mi250x', 'm2-max', 'cpu-lavapipe']) {
    const d = DEVICE_PROFILES[name];
    equal(d.peakF16, DEVICE_PEAKS[name].f16 * 1e12);
    equal(d.peakF32, DEVICE_PEAKS[name].f32 * 1e12);
    ok(d.memoryBytes > 0 && d.memBandwidth > 0);
    const big = gemmRate(d, 'bf16', 8192, 8192, 8192);
    ok(big < peakFlops(d, 'bf16') && big > 0.5 * d.gemm.efficiency * peakFlops(d, 'bf16'), name);
  }
});

Deno.test('rate curve: grows with the smallest dimension, loses to tile quantisation and misalignment, heads pad to 32', () => {
  const d = DEVICE_PROFILES['a100-80g'];
  ok(gemmRate(d, 'bf16', 4096, 4096, 64) < gemmRate(d, 'bf16', 4096, 4096, 1024));
  ok(gemmRate(d, 'bf16', 4096, 4096 + 8, 4096) < gemmRate(d, 'bf16', 4096, 4096, 4096)); // a partly empty tile column
  const aligned = gemmRate(d, 'bf16', 4096, 25152, 4096), odd = gemmRate(d, 'bf16', 4096, 25129, 4096);
  ok(odd < 0.6 * aligned, 'a misaligned width runs the slow path');
  ok(attentionRate(d, 'bf16', 80) < attentionRate(d, 'bf16', 64));
  ok(attentionRate(d, 'bf16', 128) > attentionRate(d, 'bf16', 64));
  throws(() => gemmRate(d, 'bf16', 0, 1, 1), /dimensions must be positive/);
});

Deno.test('JSON profiles: a saved profile round-trips; a bench file is fitted; bad files name the field', async () => {
  const h = DEVICE_PROFILES['h100-sxm'];
  equal(parseDeviceJson(JSON.parse(JSON.stringify(h)), 'x.json').peakF16, h.peakF16);
  const rows = [64, 128, 256, 512, 1024].map((n) => ({
    m: n,
    n,
    k: n,
    kernel: 'shipped',
    gflops: 1000 * n / (n + 100),
  }));
  const bench = { adapter: 'test GPU', results: { matmul: { squares: rows, training: [] } } };
  const fitted = parseDeviceJson(bench, 'bench.json');
  ok(Math.abs(fitted.peakF32 / 1e12 - 1) < 0.05, `fitted peak ${fitted.peakF32}`);
  ok(Math.abs(fitted.gemm.halfDim - 100) < 25, `fitted half-dimension ${fitted.gemm.halfDim}`);
  throws(
    () => parseDeviceJson({ ...h, peakF16: -1 }, 'bad.json'),
    /--device bad\.json: invalid device profile: peakF16/,
  );
  throws(() => parseDeviceJson({ results: {} }, 'b.json'), /not a matmul bench file: results\.matmul/);
  const path = await Deno.makeTempFile({ suffix: '.json' });
  try {
    await Deno.writeTextFile(path, JSON.stringify(bench));
    equal((await deviceProfile(path)).source, 'fitted to npm run bench on test GPU');
  } finally {
    await Deno.remove(path);
  }
  await rejects(
    () => deviceProfile('tpu-v9'),
    /unknown --device 'tpu-v9'; allowed: h100-sxm, a100-80g, mi250x, m2-max, cpu-lavapipe/,
  );
  await rejects(() => deviceProfile('/nonexistent/x.json'), /cannot read a JSON file/);
});
