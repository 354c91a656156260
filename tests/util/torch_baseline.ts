/** A baseline as scripts/torch_baseline.py writes it, for the quick shapes (one matmul size left out). */
export const TORCH_BASELINE = {
  device: 'test',
  torch: '0',
  date: '2026-01-01',
  matmul: [{ n: 64, dtype: 'f32', ms: 0.01, gflops: 52.4288 }, { n: 64, dtype: 'f16', ms: 0.005, gflops: 104.8576 }],
  attention: [{ t: 64, hs: 32, nh: 2, b: 1, dtype: 'f32', ms: 0.5 }],
  train: [{ name: 'gpt-quick', dtype: 'f32', mode: 'eager', msPerStep: 4, tokensPerSec: 32000, peakBytes: 2 ** 21 }],
};
