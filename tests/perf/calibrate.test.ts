/**
 * `npm run plan -- --calibrate`: a quick calibration writes a profile that `--device` reads back and predictStep
 * uses (dispatch overhead, the measured data plane); a malformed profile is refused naming its field; the fits
 * recover known parameters.
 */
import { deepStrictEqual, equal, ok, rejects } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { fixedPlanPrice, planFromArgs } from '../../src/cli/plan.ts';
import { deviceProfile, networkOf } from '../../src/perf/device_profile.ts';
import { priceFixedPlan, stepOptionsOf } from '../../src/perf/fixed_plan_price.ts';
import { DISPATCHES_PER_LAYER } from '../../src/perf/step_time.ts';
import { fitAlphaBeta, fitGemm } from '../../src/perf/calibration_fit.ts';
import { predictUs } from '../../src/comm/cost.ts';

const SPEC = 'layers=2,heads=2,hidden=64,seq=64,vocab=128,batch=8';

Deno.test('calibrate --quick: prints each figure, writes a profile --device prices with', async () => {
  const dir = await Deno.makeTempDir(), out = `${dir}/profile.json`;
  const r = await runCli('plan.ts', ['--calibrate', '--quick', '--out', out]);
  equal(r.code, 0, r.stderr);
  for (const what of ['dispatch overhead', 'matmul rate curve', 'memory bandwidth', 'flash attention', 'data plane']) {
    ok(r.stdout.includes(what), `prints ${what}:\n${r.stdout}`);
  }
  const dev = await deviceProfile(out);
  ok(
    dev.launchOverheadS! > 0 && dev.hostRoundTripS! > 0 && dev.dataPlanes?.[0].plane === 'shared',
    JSON.stringify(dev),
  );
  const argv = ['--model', SPEC, '--dp', '2', '--micro-batches', '2', '--device', out];
  const price = await fixedPlanPrice(argv);
  const { plan, model, cfg } = await planFromArgs(argv);
  const o = stepOptionsOf(cfg), net = networkOf(dev, undefined);
  const link = dev.dataPlanes![0], near = (x: number, y: number) => Math.abs(x - y) <= 1e-3 * y;
  ok(near(net.spec.inter.alphaUs, link.alphaUs) && near(net.spec.inter.betaGBps, link.betaGBps), String(net));
  deepStrictEqual(price, priceFixedPlan(plan, model, o, dev, net));
  // The dispatch overhead enters per layer and pass and for the head, every micro-batch (pp 1, no recompute).
  const without = priceFixedPlan(plan, model, o, { ...dev, launchOverheadS: 0 }, net);
  const d = DISPATCHES_PER_LAYER, per = model.nLayer * (d.forward + d.backward) + d.head;
  const want = plan.microBatches * per * dev.launchOverheadS!;
  ok(Math.abs(price!.compute - without.compute - want) < 1e-9 * want + 1e-12, `${price!.compute} ${without.compute}`);
  // Each collective call pays one host round trip: the exposed dp sync grows by at least the last bucket's.
  const noHost = priceFixedPlan(plan, model, o, { ...dev, hostRoundTripS: 0 }, net);
  ok(
    price!.exposed.dp - noHost.exposed.dp >= dev.hostRoundTripS! * (1 - 1e-9),
    `${price!.exposed.dp} ${noHost.exposed.dp}`,
  );
  // The measured link, not the nvlink-ib default, prices the dp gradient sync.
  const nvlink = priceFixedPlan(plan, model, o, dev, networkOf(dev, 'nvlink-ib'));
  ok(price!.exposed.dp !== nvlink.exposed.dp, `${price!.exposed.dp} vs ${nvlink.exposed.dp}`);
  await Deno.remove(dir, { recursive: true });
});

Deno.test('a malformed calibrated profile is refused naming the field', async () => {
  const dir = await Deno.makeTempDir();
  const base = {
    name: 'x',
    peakF32: 1e10,
    peakF16: 1e10,
    memoryBytes: 1e9,
    memBandwidth: 1e9,
    gemm: { efficiency: 1, halfDim: 32, tile: 16, align: 4, misaligned: 0.8 },
    attention: { efficiency: 0.5, halfHeadDim: 0 },
  };
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ launchOverheadS: -1 }, /launchOverheadS/],
    [{ dataPlanes: [{ plane: 'shared', alphaUs: 5, betaGBps: 0 }] }, /dataPlanes\.0\.betaGBps/],
    [{ dataPlanes: [{ alphaUs: 5, betaGBps: 1 }] }, /dataPlanes\.0\.plane/],
  ];
  for (const [extra, field] of cases) {
    const path = `${dir}/bad.json`;
    await Deno.writeTextFile(path, JSON.stringify({ ...base, ...extra }));
    await rejects(deviceProfile(path), field);
  }
  ok((await deviceProfile(await write(dir, base))).launchOverheadS === undefined);
  await Deno.remove(dir, { recursive: true });
});

async function write(dir: string, o: unknown) {
  await Deno.writeTextFile(`${dir}/ok.json`, JSON.stringify(o));
  return `${dir}/ok.json`;
}

Deno.test('fitAlphaBeta and fitGemm recover the parameters of exact points', () => {
  const link = { alphaUs: 40, betaGBps: 2.5 };
  const pts = [1024, 8192, 65536, 1 << 20].map((bytes) => ({
    bytes,
    us: predictUs('allReduce', 'ring', bytes, 2, link),
  }));
  const fit = fitAlphaBeta('allReduce', 'ring', 2, pts);
  ok(Math.abs(fit.alphaUs - 40) < 1e-6 && Math.abs(fit.betaGBps - 2.5) < 1e-6, JSON.stringify(fit));
  const rows = [16, 64, 256, 1024].map((x) => ({ m: x, n: 2 * x, k: x, gflops: (50 * x) / (x + 64) }));
  const g = fitGemm(rows);
  ok(Math.abs(g.halfDim - 64) / 64 < 0.15 && Math.abs(g.rGflops - 50) / 50 < 0.1, JSON.stringify(g));
});
