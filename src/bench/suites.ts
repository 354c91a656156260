/**
 * The suites of `npm run bench` (src/cli/bench.ts runs them): each times one part of the project
 * against a baseline measured in the same run and prints its table. Kept apart from the CLI so
 * the list reads in one place and the CLI holds only flags and the run loop.
 */
import type { Gpu } from '../gpu/context.ts';
import { benchBiasEpilogue, benchMatmul, benchMatmulShapes } from './matmul.ts';
import { benchTrain } from './train.ts';
import { attentionTable, benchAttention, parseAttentionFlag } from './attention.ts';
import { benchScan } from './scan.ts';
import { benchSample } from './sample.ts';
import { fmt, table } from './table.ts';

/** What a suite gets: the device and the parsed common options. */
export interface SuiteContext {
  gpu: Gpu;
  /** Square sizes for size-swept suites (--sizes). */
  sizes?: number[];
  /** The attention suite's shape (--attn b=1,nh=4,hs=64,causal=1,reps=3,tiled=0). */
  attn?: string;
  log: (line: string) => void;
}

/** A named benchmark: prints its own table through `log`, returns its JSON-able results. */
export interface Suite {
  description: string;
  run(ctx: SuiteContext): Promise<unknown>;
}

export const DEFAULT_MATMUL_SIZES = [128, 256, 512, 1024];

/** Every suite `npm run bench` knows, in the order `all` runs them. */
export const SUITES: Record<string, Suite> = {
  matmul: {
    description: 'shipped matmul vs the plain 16×16 tile kernel at 128³…1024³, then training shapes',
    async run({ gpu, sizes, log }) {
      const rows = await benchMatmul(gpu, sizes ?? DEFAULT_MATMUL_SIZES);
      log(table(
        ['M×N×K', 'shipped ms', 'shipped GFLOP/s', 'plain ms', 'plain GFLOP/s', 'ratio'],
        rows.filter((r) => r.kernel === 'shipped').map((s) => {
          const p = rows.find((r) => r.kernel === 'plain' && r.m === s.m && r.n === s.n && r.k === s.k)!;
          return [`${s.m}×${s.n}×${s.k}`, fmt(s.ms), fmt(s.gflops), fmt(p.ms), fmt(p.gflops), `${s.ratio.toFixed(1)}×`];
        }),
      ));
      const shapes = await benchMatmulShapes(gpu);
      log('');
      log(table(
        ['training shape', 'M×N×K', 'layout', 'ms', 'GFLOP/s'],
        shapes.map((r) => [r.name, `${r.m}×${r.n}×${r.k}`, r.layout, fmt(r.ms), fmt(r.gflops)]),
      ));
      const bias = await benchBiasEpilogue(gpu);
      log('');
      log(table(
        ['y = x·Wᵀ + b', 'M×N×K', 'fused ms', 'matmul + bias pass ms', 'unfused / fused'],
        bias.map((r) => [r.name, `${r.m}×${r.n}×${r.k}`, fmt(r.fusedMs), fmt(r.unfusedMs), `${r.ratio.toFixed(2)}×`]),
      ));
      return { squares: rows, training: shapes, biasEpilogue: bias };
    },
  },
  train: {
    description:
      'ms/step and tokens/s of training steps of the tiny and nanogpt-cpu presets on Tiny Shakespeare; the bias add fused into the matmul vs a separate pass, alternating in the same run',
    async run({ gpu, log }) {
      const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
      const rows = [await benchTrain(gpu, text, 'tiny', 20, 3), await benchTrain(gpu, text, 'nanogpt-cpu', 10, 3)];
      log(table(
        [
          'preset',
          'params',
          'tokens/step',
          'ms/step',
          'unfused-bias ms/step',
          'fused speedup',
          'tokens/s',
          'model GFLOP/s',
        ],
        rows.map((
          r,
        ) => [
          r.preset,
          String(r.params),
          String(r.tokensPerStep),
          fmt(r.msPerStep),
          r.unfusedMsPerStep ? fmt(r.unfusedMsPerStep) : '-',
          r.fusedSpeedup ? `${r.fusedSpeedup.toFixed(2)}×` : '-',
          fmt(r.tokensPerSec),
          fmt(r.gflops),
        ]),
      ));
      for (const r of rows.filter((x) => x.kernels.length)) {
        const total = r.kernels.reduce((a, k) => a + k.ms, 0);
        log(`\nGPU time of one ${r.preset} step by kernel (timestamp queries; ${fmt(total)} ms in all):`);
        log(table(
          ['kernel', 'dispatches', 'ms', 'share'],
          r.kernels.slice(0, 12).map((
            k,
          ) => [k.key, String(k.count), fmt(k.ms), `${((100 * k.ms) / total).toFixed(1)}%`]),
        ));
      }
      return rows;
    },
  },
  attention: {
    description:
      'forward+backward of naive vs flash attention, T = 128…2048 (…8192 on GPUs): median ms and peak pool bytes',
    async run({ gpu, sizes, attn, log }) {
      const opts = { sizes, ...parseAttentionFlag(attn ?? '') };
      const rows = await benchAttention(gpu, opts);
      const { header, cells, verdict } = attentionTable(rows);
      log(`B=${opts.b ?? 1} nh=${opts.nh ?? 4} hs=${opts.hs ?? 64} causal=${opts.causal ?? true}`);
      log(table(header, cells));
      log(verdict);
      return rows;
    },
  },
  scan: {
    description: 'forward+backward of chunked vs sequential linear attention and of the selective scan, T = 256…4096',
    async run({ gpu, sizes, log }) {
      const rows = await benchScan(gpu, sizes ?? [256, 512, 1024, 2048, 4096]);
      log('linear attention: B=1, 4 heads of 64; selective scan: B=1, D=256, N=16');
      log(table(
        ['T', 'chunked ms', 'sequential ms', 'sequential/chunked', 'scan ms', 'scan tokens/s'],
        rows.map((
          r,
        ) => [
          String(r.t),
          fmt(r.chunkedMs),
          fmt(r.sequentialMs),
          `${r.ratio.toFixed(2)}×`,
          fmt(r.scanMs),
          fmt(r.scanTokensPerSec),
        ]),
      ));
      return rows;
    },
  },
  sample: {
    description:
      'tokens/s of sampling with the decoding cache vs recomputing the context, per architecture (width 64) and context (--sizes, default 128,512), alternating in the same run',
    async run({ gpu, sizes, log }) {
      const rows = [];
      for (const blockSize of sizes ?? [128, 512]) rows.push(...await benchSample(gpu, { blockSize }));
      log('16-token prompt, 48 tokens generated per call, untrained weights; median of 3 rounds after a warm-up');
      log(table(
        ['arch', 'context', 'params', 'cached tokens/s', 'recompute tokens/s', 'cached/recompute', 'same tokens'],
        rows.map((r) => [
          r.arch,
          String(r.blockSize),
          String(r.params),
          fmt(r.cachedTokensPerSec),
          fmt(r.recomputeTokensPerSec),
          `${r.speedup.toFixed(2)}×`,
          r.sameTokens ? 'yes' : 'NO',
        ]),
      ));
      return rows;
    },
  },
};
