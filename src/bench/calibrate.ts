/**
 * `npm run plan -- --calibrate`'s measurements (docs/design.md#a-performance-model-that-chooses-the-plan): on the
 * adapter the CLI opened, the per-dispatch overhead (many tiny elementwise adds), the matmul rate over a few shapes,
 * memory bandwidth (a large elementwise add), the FlashAttention forward + backward rate, and the worker data plane's
 * α and β (an allReduce sweep over message sizes on two worker ranks). Kernels are timed by the bench's timer
 * (src/bench/timing.ts timeKernels), attention by the attention suite and the links by the comm suite, so the
 * profile holds the figures `npm run bench` prints. Each kernel time has the measured dispatch overhead taken off
 * before it becomes a rate, because step_time.ts adds that overhead per dispatch on its own.
 */
import type { Gpu } from '../gpu/context.ts';
import { matmul } from '../kernels/matmul.ts';
import { add } from '../kernels/elementwise.ts';
import { fill, timeKernels } from './timing.ts';
import { benchAttention } from './attention.ts';
import { benchComm } from './comm.ts';
import { QUICK_BUDGET } from '../comm/timing.ts';
import type { DataPlane } from '../comm/data_plane.ts';
import { type CommPoint, fitAlphaBeta, fitGemm, type GemmPoint } from '../perf/calibration_fit.ts';
import type { DeviceProfile } from '../perf/device_profile.ts';

/** How much to measure: `quick` is the tests' seconds-long run, `full` the CLI's (about a minute on lavapipe). */
export type CalibrationSize = 'quick' | 'full';

const SIZES = {
  quick: {
    gemm: [[32, 32, 32], [64, 64, 64], [128, 64, 128]],
    timing: { reps: 3, minRepMs: 5, maxMsPerShape: 300 },
    dispatches: 256,
    workFlops: 2 ** 22,
    copyElems: 1 << 16,
    copyRepeat: 4,
    attn: { t: 64, nh: 2, hs: 32 },
    comm: { minBytes: 1 << 10, maxBytes: 1 << 16, step: 8 },
    planes: ['shared'] as DataPlane[],
  },
  full: {
    gemm: [[64, 64, 64], [128, 128, 128], [256, 256, 256], [512, 512, 512], [512, 128, 512], [256, 768, 256]],
    timing: { reps: 5, minRepMs: 50, maxMsPerShape: 3000 },
    dispatches: 8192,
    workFlops: 2 ** 27,
    copyElems: 1 << 22,
    copyRepeat: 16,
    attn: { t: 256, nh: 4, hs: 64 },
    comm: { minBytes: 1 << 10, maxBytes: 4 << 20, step: 4 },
    planes: ['shared', 'message'] as DataPlane[],
  },
};

/** Runs `fn` on fresh f32 tensors of the given sizes, released afterwards. */
async function withTensors<T>(gpu: Gpu, sizes: number[], fn: (...t: ReturnType<Gpu['upload']>[]) => Promise<T>) {
  const ts = sizes.map((n, i) => gpu.upload(fill(n, i + 1), [n], 'f32', `calibrate.${i}`));
  try {
    return await fn(...ts);
  } finally {
    for (const t of ts) t.release();
  }
}

/**
 * Measures `gpu` and the worker data planes and returns the profile (named `name`) with one printed line per figure.
 * Units as DeviceProfile's: FLOP/s, bytes/s, seconds; α µs, β GB/s.
 * @throws Error when a measurement fails (a kernel error, or a worker world that does not start).
 */
export async function calibrate(
  gpu: Gpu,
  size: CalibrationSize,
  name: string,
  log: (line: string) => void,
): Promise<DeviceProfile> {
  const s = SIZES[size], t = s.timing;
  // Each timed call encodes `inner` dispatches of `enc` and waits once (batch 1), so the submit-and-wait round trip
  // (milliseconds on lavapipe), measured first with one tiny dispatch, comes off exactly: (call − round trip) / inner.
  const once = { ...t, minRepMs: 1e-3 };
  const call = async (enc: () => void, inner: number) =>
    (await timeKernels(gpu, [() => {
      for (let i = 0; i < inner; i++) enc();
    }], once))[0];
  let syncMs = 0;
  const per = async (enc: () => void, inner: number) => Math.max((await call(enc, inner)) - syncMs, 1e-6) / inner;
  const launchMs = await withTensors(gpu, [64, 64, 64], async (a, b, c) => {
    syncMs = await call(() => add(gpu, a, b, c), 1);
    return await per(() => add(gpu, a, b, c), s.dispatches);
  });
  const launchS = launchMs / 1e3, net = (ms: number, dispatches: number) => ms / 1e3 - dispatches * launchS;
  log(`dispatch overhead  ${(launchS * 1e6).toFixed(1)} µs per kernel (64-element add, ${s.dispatches} per submit)`);
  log(`submit and wait    ${syncMs.toPrecision(3)} ms per round trip (one add, then wait for the queue)`);
  const gemm: GemmPoint[] = [];
  for (const [m, n, k] of s.gemm) {
    const flops = 2 * m * n * k, inner = Math.ceil(s.workFlops / flops);
    const ms = await withTensors(
      gpu,
      [m * k, k * n, m * n],
      (a, b, c) => per(() => matmul(gpu, a, b, c, m, n, k), inner),
    );
    gemm.push({ m, n, k, gflops: flops / Math.max(net(ms, 1), 1e-9) / 1e9 });
    log(`matmul ${m}×${n}×${k}`.padEnd(19) + ` ${ms.toPrecision(3)} ms, ${gemm.at(-1)!.gflops.toFixed(2)} GFLOP/s`);
  }
  const fit = fitGemm(gemm), peak = fit.rGflops * 1e9;
  log(
    `matmul rate curve  ${fit.rGflops.toFixed(2)} GFLOP/s · x/(x + ${
      fit.halfDim.toFixed(0)
    }), x the smallest dimension`,
  );
  const n = s.copyElems;
  const copyMs = await withTensors(gpu, [n, n, n], (a, b, c) => per(() => add(gpu, a, b, c), s.copyRepeat));
  const bandwidth = (3 * 4 * n) / Math.max(net(copyMs, 1), 1e-9);
  log(`memory bandwidth   ${(bandwidth / 1e9).toFixed(2)} GB/s (c = a + b over ${n} f32, 12 bytes per element)`);
  const { t: T, nh, hs } = s.attn;
  const [row] = await benchAttention(gpu, { sizes: [T], nh, hs, kernels: ['flash'], reps: 3 });
  if (row.ms === null) throw new Error(`calibrate: flash attention at T ${T} did not run (${row.note})`);
  // step_time.ts prices 4·T²·C FLOPs forward (causal not halved) and twice that backward; three dispatches. The
  // suite waits for each call, so its round trip comes off too.
  const attnRate = (3 * 4 * T * T * nh * hs) / Math.max(net(row.ms - syncMs, 3), 1e-9);
  log(
    `flash attention    ${row.ms.toPrecision(3)} ms fwd+bwd at T ${T}, ${nh}×${hs}: ${
      (attnRate / 1e9).toFixed(2)
    } GFLOP/s`,
  );
  const rows = await benchComm({
    worlds: [2],
    ...s.comm,
    collectives: ['allReduce'],
    algorithms: ['ring'],
    budget: QUICK_BUDGET,
    planes: s.planes,
    log: () => {},
  });
  const dataPlanes = s.planes.map((plane) => {
    const pts: CommPoint[] = rows.filter((r) => r.plane === plane).map((r) => ({ bytes: r.bytes, us: r.median * 1e3 }));
    const link = fitAlphaBeta('allReduce', 'ring', 2, pts);
    log(
      `${plane} data plane`.padEnd(19) +
        ` α ${link.alphaUs.toFixed(1)} µs, β ${
          link.betaGBps.toFixed(3)
        } GB/s (ring allReduce, 2 ranks, ${pts.length} sizes)`,
    );
    return { plane, ...link, points: pts };
  });
  const efficiency = Math.min(1, attnRate / peak);
  if (attnRate > peak) log(`note: attention measured above the matmul curve's peak; priced at the peak`);
  return {
    name,
    source: `npm run plan -- --calibrate on ${gpu.adapterDescription} (${new Date().toISOString().slice(0, 10)})`,
    peakF32: peak,
    peakF16: peak, // WebGPU kernels compute in f32
    memoryBytes: gpu.isCpu ? Deno.systemMemoryInfo().total : 16 * 2 ** 30,
    memBandwidth: bandwidth,
    gemm: { efficiency: 1, halfDim: fit.halfDim, tile: 16, align: 4, misaligned: 0.8 },
    attention: { efficiency, halfHeadDim: 0 },
    launchOverheadS: launchS,
    hostRoundTripS: syncMs / 1e3,
    dataPlanes: dataPlanes.map(({ plane, alphaUs, betaGBps }) => ({ plane, alphaUs, betaGBps })),
    calibration: { size, launchMs, syncMs, gemm, copyMs, attention: { t: T, nh, hs, ms: row.ms }, dataPlanes },
  };
}
