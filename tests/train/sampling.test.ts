import { equal, ok } from 'node:assert/strict';
import { pick } from '../../src/train/trainer.ts';
import { Random } from '../../src/util/random.ts';

Deno.test('sampling: top-k never picks outside the k largest; low temperature is greedy; frequencies follow softmax', () => {
  const logits = Float32Array.from([0.1, 2.0, -1.0, 1.5, 0.0]);
  const rng = new Random(1);
  for (let i = 0; i < 500; i++) ok([1, 3].includes(pick(logits, 1, 2, rng)), 'top-2 picks index 1 or 3');
  for (let i = 0; i < 50; i++) equal(pick(logits, 1e-3, 0, rng), 1);
  const counts = new Array(5).fill(0);
  const n = 20000;
  for (let i = 0; i < n; i++) counts[pick(logits, 1, 0, rng)]++;
  const z = Array.from(logits).reduce((a, x) => a + Math.exp(x), 0);
  for (let j = 0; j < 5; j++) {
    const p = Math.exp(logits[j]) / z;
    ok(
      Math.abs(counts[j] / n - p) < 4 * Math.sqrt(p * (1 - p) / n) + 1e-3,
      `frequency of ${j}: ${counts[j] / n} vs ${p}`,
    );
  }
});
