/**
 * The collective layer in Chromium: collectives.html launches worlds of 1–8 browser module
 * workers (workers/rank.worker.ts) and runs the same scenario matrix as the Deno tests
 * (src/comm/scenarios.ts), bit-exact on every rank; a mismatched call must fail naming both
 * calls; a traced ring allReduce must show 2(p−1) sends per rank.
 */
import { expect, test } from '@playwright/test';

interface CollectiveResult {
  name: string;
  ok: boolean;
  cases: number;
  failures: string[];
  error?: string;
  ms: number;
}

test('collectives are bit-exact in worlds of 1–8 browser workers; a mismatch names both calls', async ({ page }) => {
  test.setTimeout(240_000);
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(err.message));
  await page.goto('/collectives.html');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 230_000 });
  const results = await page.evaluate(() =>
    (window as unknown as { collectiveResults: CollectiveResult[] }).collectiveResults
  );
  const byName = new Map(results.map((r) => [r.name, r]));
  for (let n = 1; n <= 8; n++) {
    const r = byName.get(`world-${n}`);
    expect(r, `world of ${n} ran`).toBeDefined();
    expect(r!.failures, `world of ${n}`).toEqual([]);
    expect(r!.error, `world of ${n}`).toBeUndefined();
    expect(r!.cases, `world of ${n}`).toBeGreaterThan(500);
    expect(r!.ok).toBe(true);
  }
  const mm = byName.get('mismatch')!;
  expect(mm.error).toMatch(
    /^rank \d called (allReduce|reduceScatter)\(sum\/ring, f32×1024\) in group world#1 but rank \d sent (reduceScatter|allReduce)\(sum\/ring, f32×1024\)$/,
  );
  expect(mm.ok).toBe(true);
  expect(byName.get('trace')!.ok, byName.get('trace')!.failures.join('; ')).toBe(true);
  await expect(page.getByTestId('status')).toHaveText(`all ${results.length} passed`);
  // The merged trace downloads as Chrome Trace Event JSON with one thread per rank on both clocks.
  const download = page.waitForEvent('download');
  await page.getByTestId('trace-download').click();
  const file = await (await download).path();
  const { readFile } = await import('node:fs/promises');
  const trace = JSON.parse(await readFile(file, 'utf8')) as {
    traceEvents: { ph: string; pid: number; tid: number; cat?: string }[];
  };
  const sends = trace.traceEvents.filter((e) => e.ph === 'X' && e.cat === 'send');
  expect(new Set(sends.map((e) => `${e.pid}/${e.tid}`)).size).toBe(2 * 4);
  expect(sends.length).toBe(2 * 4 * 2 * 3); // 2 clocks × 4 ranks × 2(p−1)
  expect(errors).toEqual([]);
});
