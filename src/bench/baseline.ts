/**
 * The PyTorch baseline the scale suite compares against: the JSON `scripts/torch_baseline.py`
 * writes on the same GPU (matmul, attention and the GPT-2-124M step in f32 and autocast f16,
 * eager and torch.compile), validated with zod, and the our/PyTorch ratio columns built from it.
 */
import { z } from 'zod';
import type { ScaleAttentionRow, ScaleMatmulRow, ScaleTrainRow } from './scale.ts';
import { fmt } from './table.ts';
import { zodIssues } from '../util/digest.ts';

const Dtype = z.enum(['f32', 'f16']);
const num = z.number().positive();

/** What torch_baseline.py writes. */
export const TorchBaselineSchema = z.object({
  device: z.string(),
  torch: z.string(),
  date: z.string(),
  matmul: z.array(z.object({ n: z.number().int().positive(), dtype: Dtype, ms: num, gflops: num })),
  attention: z.array(z.object({
    t: z.number().int().positive(),
    hs: z.number().int().positive(),
    nh: z.number().int().positive(),
    b: z.number().int().positive(),
    dtype: Dtype,
    ms: num,
  })),
  train: z.array(z.object({
    name: z.string(),
    dtype: Dtype,
    mode: z.enum(['eager', 'compile']),
    tokensPerSec: num,
    msPerStep: num,
    peakBytes: z.number().int().nonnegative(),
  })),
});
export type TorchBaseline = z.infer<typeof TorchBaselineSchema>;

/**
 * Parses a baseline file's text.
 * @throws Error naming the file and every field that does not match the schema.
 */
export function parseTorchBaseline(text: string, file: string): TorchBaseline {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`--baseline ${file}: not JSON (${(e as Error).message})`);
  }
  const r = TorchBaselineSchema.safeParse(raw);
  if (!r.success) {
    throw new Error(`--baseline ${file}: not a torch_baseline.py result: ${zodIssues(r.error)}`);
  }
  return r.data;
}

/** "1.23×" of ours over theirs, or "–" when PyTorch did not measure that shape. */
function ratio(ours: number | null, theirs: number | undefined): string {
  return ours === null || theirs === undefined ? '–' : `${fmt(ours / theirs)}×`;
}

/** Matmul cells: PyTorch f32 and f16 GFLOP/s, and ours over f32. */
export function matmulBaselineCells(r: ScaleMatmulRow, base: TorchBaseline): string[] {
  const f32 = base.matmul.find((m) => m.n === r.n && m.dtype === 'f32')?.gflops;
  const f16 = base.matmul.find((m) => m.n === r.n && m.dtype === 'f16')?.gflops;
  return [f32 === undefined ? '–' : fmt(f32), f16 === undefined ? '–' : fmt(f16), ratio(r.gflops, f32)];
}

/** Attention cells: PyTorch f32 and f16 ms, and our speed over f32 (their time / ours). */
export function attentionBaselineCells(r: ScaleAttentionRow, base: TorchBaseline): string[] {
  const at = (dtype: string) =>
    base.attention.find((a) => a.t === r.t && a.hs === r.hs && a.nh === r.nh && a.b === r.b && a.dtype === dtype)?.ms;
  const [f32, f16] = [at('f32'), at('f16')];
  return [
    f32 === undefined ? '–' : fmt(f32),
    f16 === undefined ? '–' : fmt(f16),
    r.ms === null || f32 === undefined ? '–' : `${fmt(f32 / r.ms)}×`,
  ];
}

/** Training rows: each PyTorch (dtype, mode) beside ours, as tokens/s and our/their ratio. */
export function trainBaselineRows(r: ScaleTrainRow, base: TorchBaseline): string[][] {
  return base.train.filter((t) => t.name === r.name).map((t) => [
    `PyTorch ${t.dtype} ${t.mode}`,
    fmt(t.tokensPerSec),
    fmt(t.msPerStep),
    (t.peakBytes / 2 ** 20).toFixed(0),
    ratio(r.tokensPerSec, t.tokensPerSec),
  ]);
}
