/**
 * The compression lesson's real run: a traced compressed allReduce (src/comm/compressed.ts) on
 * the page's own GPU over an in-thread world (comm/local.ts), one call per step under one name so
 * error feedback carries its residuals, as the dp gradient sync does. Each rank's communicator is
 * tapped: the words a rank hands its allToAll are exactly what it sends in phase 1, and they
 * are decoded here with the scheme's own decompressor. Loaded on demand (it pulls in the GPU
 * context and the compression kernels).
 */
import type { Communicator } from '../../comm/communicator.ts';
import { CompressedComm, compressorFor } from '../../comm/compressed.ts';
import { parseScheme, type Scheme, schemeWords } from '../../comm/compression.ts';
import { closeLocalWorld, localWorld } from '../../comm/local.ts';
import { Gpu } from '../../gpu/context.ts';
import { releaseCompressed, unpackMessage } from '../../kernels/compress/index.ts';
import { type CompressStep, LESSON, lessonInput, wordsByRank } from './compress_replay.ts';

/** `comm` with every allToAll input copied into `log` before it goes (the call overwrites it in place). */
function tapped(comm: Communicator, log: Int32Array[]): Communicator {
  return new Proxy(comm, {
    get(target, key) {
      const v = Reflect.get(target, key, target);
      if (key !== 'allToAll') return typeof v === 'function' ? v.bind(target) : v;
      return (x: Int32Array, ...rest: unknown[]) => {
        log.push(x.slice());
        return (v as (...a: unknown[]) => unknown).call(target, x, ...rest);
      };
    },
  });
}

/** Messages of c values back to back in `words` (schemeWords(s, c) each), decoded on the GPU. */
async function decode(gpu: Gpu, s: Scheme, words: Int32Array, c: number): Promise<Float32Array> {
  const comp = compressorFor(s), w = schemeWords(s, c), k = words.length / w, out = new Float32Array(k * c);
  const packed = gpu.upload(new Uint32Array(words.buffer, words.byteOffset, words.length), [words.length], 'u32');
  const m = comp.allocate(gpu, c), y = gpu.empty([c], 'f32', 'lesson.decoded');
  try {
    for (let j = 0; j < k; j++) {
      unpackMessage(gpu, packed, j * w, m);
      comp.decompress(gpu, m, y);
      out.set(await gpu.read(y) as Float32Array, j * c);
    }
  } finally {
    releaseCompressed(m);
    y.release();
    packed.release();
  }
  return out;
}

/** The residual `key` of `cc` as n values (zeros before its first use). */
async function residualOf(gpu: Gpu, cc: CompressedComm, key: string, n: number): Promise<Float32Array> {
  const t = cc.residual(key);
  const out = new Float32Array(n);
  if (t) out.set((await gpu.read(t) as Float32Array).subarray(0, n));
  return out;
}

/**
 * Runs LESSON.steps compressed allReduces of lessonInput on LESSON.p ranks under `scheme` (an
 * error-feedback scheme: top-k or sign) and records every step (compress_replay.ts).
 * @throws Error for a scheme without an elementwise compressor, or from the GPU.
 */
export async function traceCompressedSteps(gpu: Gpu, scheme: string): Promise<CompressStep[]> {
  const s = parseScheme(scheme), { p, n, steps } = LESSON, c = Math.ceil(n / p);
  const world = localWorld(p, { trace: true });
  const logs = world.map(() => [] as Int32Array[]);
  const ccs = world.map((comm, r) => new CompressedComm(tapped(comm, logs[r]), gpu, s, true));
  try {
    const out: CompressStep[] = [];
    for (let t = 0; t < steps; t++) {
      const marks = world.map((w) => w.tracer.spans.length);
      for (const l of logs) l.length = 0;
      const inputs = world.map((_, r) => lessonInput(r, t, n));
      const ys = await Promise.all(ccs.map((cc, r) => cc.allReduce(inputs[r].slice(), { name: 'g' })));
      const spans = world.flatMap((w, r) => w.tracer.spans.slice(marks[r]));
      const sent = await Promise.all(logs.map(async (l) => (await decode(gpu, s, l[0], c)).subarray(0, n)));
      const residual: Float32Array[] = [];
      for (const cc of ccs) {
        const e = new Float32Array(n);
        for (let j = 0; j < p; j++) e.set((await residualOf(gpu, cc, `g/${j}`, c)).subarray(0, Math.max(0, n - j * c)), j * c);
        residual.push(e);
      }
      const reducedResidual = new Float32Array(n);
      for (let j = 0; j < p; j++) {
        reducedResidual.set((await residualOf(gpu, ccs[j], 'g/reduced/0', c)).subarray(0, Math.max(0, n - j * c)), j * c);
      }
      out.push({ inputs, sent, residual, output: ys[0].slice(), reducedResidual, words: wordsByRank(spans, p) });
    }
    return out;
  } finally {
    for (const cc of ccs) cc.release();
    closeLocalWorld(world);
  }
}

/** Opens the page's GPU, runs {@link traceCompressedSteps} and closes the device again. */
export async function runCompressLesson(scheme: string): Promise<CompressStep[]> {
  const gpu = await Gpu.create({ backend: 'browser' });
  try {
    return await traceCompressedSteps(gpu, scheme);
  } finally {
    gpu.destroy();
  }
}
