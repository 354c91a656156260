import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import { adamwUpdate, gradNorm, packAdamHyper, sgdUpdate } from '../../src/kernels/adamw.ts';
import { adamwStepRef, gradNormRef, sgdStepRef } from '../../src/reference/adamw.ts';

for (const n of [1, 7, 65, 1_000_003]) {
  gpuTest(`gradNorm n=${n} vs f64 sum`, async (gpu) => {
    const g = randn(n, n + 7);
    // Large first and last entries: dropping either (a ragged-edge bug) moves the norm far
    // beyond tolerance even at a million elements.
    g[0] = 300;
    g[n - 1] = n > 1 ? -500 : g[n - 1];
    const tg = gpu.upload(Float32Array.from(g), [n]);
    const norm = gpu.upload(new Float32Array([NaN, NaN]), [2]);
    const ref0 = gradNormRef(g, 0)[0];
    for (const maxNorm of [0, -1, ref0 * 0.5, ref0 * 2]) {
      gradNorm(gpu, tg, norm, maxNorm);
      const ref = gradNormRef(g, maxNorm);
      if (maxNorm === ref0 * 0.5 && !(ref[1] < 0.6)) {
        throw new Error('test setup: clipping should be active');
      }
      assertClose(await gpu.read(norm), ref, `norm maxNorm=${maxNorm}`, 0, 1e-5);
    }
    tg.release();
    norm.release();
  });
}

gpuTest('packAdamHyper layout and validation', () => {
  const h = packAdamHyper({ lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, step: 3 });
  assertClose(h, [3e-4, 0.9, 0.95, 1e-8, 1 - 0.9 ** 3, 1 - 0.95 ** 3, 0, 0], 'hyper', 0, 1e-7);
  assertThrows(() => packAdamHyper({ lr: 1, beta1: 0.9, beta2: 0.95, eps: 1e-8, step: 0 }), 'step');
  assertThrows(() => packAdamHyper({ lr: 1, beta1: 1, beta2: 0.95, eps: 1e-8, step: 1 }), 'beta1');
  return Promise.resolve();
});

/** Parameter sizes of one flat buffer; each slice starts 256-byte aligned, as the model lays them out. */
const SIZES = [1, 300, 1000, 65];

interface Config {
  name: string;
  weightDecay: number;
  maxNorm: number;
  eps: number;
  gradScale: number;
  clipActive: boolean;
}

const CONFIGS: Config[] = [
  {
    name: 'no decay, no clipping',
    weightDecay: 0,
    maxNorm: 0,
    eps: 1e-8,
    gradScale: 1,
    clipActive: false,
  },
  {
    name: 'decay, clipping active',
    weightDecay: 0.1,
    maxNorm: 1,
    eps: 1e-8,
    gradScale: 1,
    clipActive: true,
  },
  // Tiny gradients so eps is a visible share of the denominator.
  {
    name: 'decay, clipping inactive, eps-dominated',
    weightDecay: 0.5,
    maxNorm: 1e6,
    eps: 1e-3,
    gradScale: 1e-3,
    clipActive: false,
  },
];

for (const cfg of CONFIGS) {
  gpuTest(`adamw 6 steps vs f64 reference: ${cfg.name}`, async (gpu) => {
    const offsets: number[] = [];
    let total = 0;
    for (const s of SIZES) {
      offsets.push(total);
      total += Math.ceil(s / 64) * 64;
    }
    const p0 = randn(total, 1);
    const flatP = gpu.upload(Float32Array.from(p0), [total], 'f32', 'params');
    const flatG = gpu.zeros([total], 'f32', 'grads');
    const flatM = gpu.zeros([total], 'f32', 'm');
    const flatV = gpu.zeros([total], 'f32', 'v');
    const slice = (flat: Tensor, i: number) =>
      new Tensor(gpu, flat.buffer, [SIZES[i]], 'f32', offsets[i] * 4, false, `${flat.label}[${i}]`);
    const hyper = gpu.zeros([8]);
    const norm = gpu.zeros([2]);
    // Slice 0 plays a bias: no weight decay, as nanoGPT's parameter groups.
    const wd = (i: number) => (i === 0 ? 0 : cfg.weightDecay);

    const rp = Float64Array.from(p0), rm = new Float64Array(total), rv = new Float64Array(total);
    for (let step = 1; step <= 6; step++) {
      const g = new Float64Array(total);
      SIZES.forEach((s, i) => g.set(randn(s, step * 10 + i, -cfg.gradScale, cfg.gradScale), offsets[i]));
      const h = { lr: 1e-2 * (1 - step / 10), beta1: 0.9, beta2: 0.95, eps: cfg.eps, step };
      gpu.write(flatG, Float32Array.from(g));
      gpu.write(hyper, packAdamHyper(h));
      gradNorm(gpu, flatG, norm, cfg.maxNorm);
      for (let i = 0; i < SIZES.length; i++) {
        adamwUpdate(
          gpu,
          slice(flatP, i),
          slice(flatG, i),
          slice(flatM, i),
          slice(flatV, i),
          hyper,
          norm,
          wd(i),
        );
      }
      // The reference sees the f32-rounded hyper-parameters the GPU sees.
      const hf = packAdamHyper(h);
      const [, clip] = gradNormRef(g, cfg.maxNorm);
      if ((clip < 1) !== cfg.clipActive) {
        throw new Error(`test setup: clip scale ${clip} for '${cfg.name}'`);
      }
      SIZES.forEach((s, i) => {
        const o = offsets[i];
        adamwStepRef(
          rp.subarray(o, o + s),
          g.subarray(o, o + s),
          rm.subarray(o, o + s),
          rv.subarray(o, o + s),
          { lr: hf[0], beta1: hf[1], beta2: hf[2], eps: hf[3], step },
          clip,
          wd(i),
        );
      });
    }
    const gp = await gpu.read(flatP), gm = await gpu.read(flatM), gv = await gpu.read(flatV);
    assertClose(gp, rp, 'param');
    assertClose(gm, rm, 'm', 1e-7 * cfg.gradScale);
    assertClose(gv, rv, 'v', 1e-9 * cfg.gradScale ** 2);
    // The parameter change is what the optimizer computes; compare it on its own scale too.
    assertRelRms(
      Float64Array.from(gp, (x, i) => x - p0[i]),
      rp.map((x, i) => x - p0[i]),
      'param update',
      1e-4,
    );
    for (const t of [flatP, flatG, flatM, flatV, hyper, norm]) t.release();
  });
}

gpuTest('adamw validates sizes and aliasing', async (gpu) => {
  const p = gpu.zeros([10]), g = gpu.zeros([10]), m = gpu.zeros([10]), v = gpu.zeros([10]);
  const h = gpu.zeros([8]), nrm = gpu.zeros([2]), short = gpu.zeros([9]);
  assertThrows(() => adamwUpdate(gpu, p, short, m, v, h, nrm, 0), 'grad has shape');
  assertThrows(() => adamwUpdate(gpu, p, g, m, v, nrm, nrm, 0), 'hyper needs at least 8');
  assertThrows(() => adamwUpdate(gpu, p, g, p, v, h, nrm, 0), 'share one GPUBuffer');
  assertThrows(() => gradNorm(gpu, g, g.view([10]), 1), 'share one GPUBuffer');
  const one = gpu.zeros([1]);
  assertThrows(() => gradNorm(gpu, g, one, 1), 'norm needs at least 2');
  for (const t of [p, g, m, v, h, nrm, short, one]) t.release();
  await gpu.sync(); // the rejected calls encoded nothing the device could complain about
});

for (const [n, maxNorm, wd] of [[1, 0, 0], [7, 0.5, 0.1], [1000, 0, 0.1], [65_537, 2, 0]] as const) {
  gpuTest(`sgdUpdate n=${n} clip ${maxNorm} decay ${wd} vs f64`, async (gpu) => {
    const p0 = randn(n, n + 3), g = randn(n, n + 4, -1, 1);
    const p = gpu.upload(Float32Array.from(p0), [n]), tg = gpu.upload(Float32Array.from(g), [n]);
    const hyper = gpu.upload(packAdamHyper({ lr: 0.05, beta1: 0.9, beta2: 0.99, eps: 1e-8, step: 1 }), [8]);
    const norm = gpu.zeros([2]);
    gradNorm(gpu, tg, norm, maxNorm);
    sgdUpdate(gpu, p, tg, hyper, norm, wd);
    const [, clip] = gradNormRef(g, maxNorm);
    if ((clip < 1) !== (maxNorm > 0 && n > 1)) throw new Error(`test setup: clip scale ${clip}`);
    const ref = Float64Array.from(p0);
    sgdStepRef(ref, g, Math.fround(0.05), clip, wd);
    const got = await gpu.read(p);
    assertClose(got, ref, 'param', 1e-6, 1e-6);
    assertRelRms(Float64Array.from(got, (x, i) => x - p0[i]), ref.map((x, i) => x - p0[i]), 'update', 2e-4);
    for (const t of [p, tg, hyper, norm]) t.release();
  });
}

gpuTest('sgdUpdate validates sizes and aliasing', async (gpu) => {
  const p = gpu.zeros([10]), g = gpu.zeros([10]), h = gpu.zeros([8]), nrm = gpu.zeros([2]), short = gpu.zeros([9]);
  assertThrows(() => sgdUpdate(gpu, p, short, h, nrm, 0), 'grad has shape');
  assertThrows(() => sgdUpdate(gpu, p, p.view([10]), h, nrm, 0), 'share one GPUBuffer');
  assertThrows(() => sgdUpdate(gpu, p, g, h, nrm, NaN), 'weightDecay');
  for (const t of [p, g, h, nrm, short]) t.release();
  await gpu.sync();
});
