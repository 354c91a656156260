/**
 * The browser demo end to end, on Chromium's WebGPU (SwiftShader on a machine without a GPU):
 * the page opens a device in its rank worker, trains a tiny GPT whose loss falls, rejects an
 * invalid config without starting, and explains itself when WebGPU is missing.
 */
import { expect, type Page, test } from '@playwright/test';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';

watchConsoleErrors();

test.afterEach(async ({ page }, testInfo) => {
  // A GPU process busy compiling a pipeline can stall screenshots: bound the wait.
  const png = await page.screenshot({ path: testInfo.outputPath('page.png'), timeout: 10_000 }).catch(() => null);
  if (png) await testInfo.attach('page', { body: png, contentType: 'image/png' });
});

/** Waits until the rank worker opened its device and the demo is ready to train. */
async function ready(page: Page): Promise<void> {
  await page.goto('/');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
}

/** A model small enough for SwiftShader (~0.16 GFLOP/s) to train 20 steps in seconds. */
const TINY_RUN = {
  nLayer: 1,
  nHead: 2,
  nEmbd: 32,
  blockSize: 32,
  batchSize: 4,
  steps: 20,
  lr: 0.01,
  warmup: 2,
  logInterval: 2,
  evalInterval: 20,
  evalBatches: 2,
  sampleTokens: 60,
};

async function fill(page: Page, values: Record<string, string | number>): Promise<void> {
  for (const [k, v] of Object.entries(values)) await page.getByTestId(`field-${k}`).fill(String(v));
}

test('loads without console errors and shows the adapter', async ({ page }) => {
  await ready(page);
  await expect(page.getByTestId('adapter')).toHaveText(/^GPU: .+ · browser$/);
  await expect(page.getByTestId('unsupported')).toBeHidden();
  await expect(page.getByTestId('start')).toBeEnabled();
  await expect(page.getByTestId('preset')).toHaveValue('tiny');
  await expect(page.getByTestId('field-nLayer')).toHaveValue('2'); // the tiny preset's defaults
  await expect(page.getByTestId('log')).toContainText('gpu: browser');
  expectNoErrors(page);
});

test('trains a tiny model: the loss falls and a sample appears', async ({ page }) => {
  // 20–90 s on 2 cores with SwiftShader, most of it compiling the matmul pipelines in the first steps.
  test.setTimeout(180_000);
  await ready(page);
  await fill(page, TINY_RUN);
  await expect(page.getByTestId('config-errors')).toBeHidden();
  await page.getByTestId('start').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'running');
  await expect(page.getByTestId('stop')).toBeEnabled();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 160_000 });

  const losses = await page.locator('#log .line.train').evaluateAll((rows) =>
    rows.map((r) => Number((r as HTMLElement).dataset.loss))
  );
  expect(losses.length).toBe(TINY_RUN.steps / TINY_RUN.logInterval);
  for (const l of losses) expect(Number.isFinite(l)).toBe(true);
  expect(losses[0]).toBeGreaterThan(3.5); // ≈ ln(65) = 4.17 at initialisation
  expect(losses[losses.length - 1]).toBeLessThan(losses[0] - 0.25); // measured: 4.09 (step 1) → 3.37 (step 19)
  await expect(page.getByTestId('metric-val')).toHaveText(/^\d+\.\d{4}$/);
  await expect(page.getByTestId('metric-step')).toHaveText(`${TINY_RUN.steps} / ${TINY_RUN.steps}`);
  const sample = await page.getByTestId('sample').textContent();
  expect(sample?.length ?? 0).toBeGreaterThanOrEqual(TINY_RUN.sampleTokens / 2); // chars ≈ tokens (newlines included)
  await expect(page.getByTestId('start')).toBeEnabled();
  expectNoErrors(page);
});

test('an invalid config shows its error and starts nothing', async ({ page }, testInfo) => {
  await ready(page);
  await fill(page, { nHead: 3, nEmbd: 32 });
  await expect(page.getByTestId('config-errors')).toBeVisible();
  await expect(page.getByTestId('config-errors')).toContainText('nEmbd (32) must be divisible by nHead (3)');
  await expect(page.getByTestId('error-nEmbd')).toContainText('divisible');
  await expect(page.getByTestId('field-nHead')).toHaveAttribute('aria-invalid', 'true');
  await expect(page.getByTestId('start')).toBeDisabled();
  // Enter in a field submits the form: it must not start a run either.
  await page.getByTestId('field-nHead').press('Enter');
  await fill(page, { steps: 0 });
  await expect(page.getByTestId('error-steps')).toContainText(/>=\s*1|too small/i);
  await expect(page.getByTestId('error-nEmbd')).toContainText('divisible'); // both problems shown at once
  await page.getByTestId('field-steps').press('Enter');
  await page.waitForTimeout(300);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(page.locator('#log .line.train')).toHaveCount(0);
  await testInfo.attach('errors shown', {
    body: await page.screenshot({ path: testInfo.outputPath('errors.png') }),
    contentType: 'image/png',
  });
  // Fixing the fields clears the errors and enables Start again.
  await fill(page, { nHead: 4, steps: 10 });
  await expect(page.getByTestId('config-errors')).toBeHidden();
  await expect(page.getByTestId('start')).toBeEnabled();
  expectNoErrors(page);
});

test('without WebGPU the page explains what is missing', async ({ page }) => {
  await page.addInitScript(() => {
    delete (Navigator.prototype as unknown as { gpu?: unknown }).gpu;
  });
  await page.goto('/');
  const box = page.getByTestId('unsupported');
  await expect(box).toBeVisible();
  await expect(box.getByRole('heading', { level: 1 })).toHaveText('This browser does not offer WebGPU');
  await expect(box).toContainText('What is WebGPU?');
  await expect(box).toContainText('chrome://flags/#enable-unsafe-webgpu');
  await expect(page.getByTestId('app')).toBeHidden();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'unsupported');
  expectNoErrors(page);
});

test('the recurrent architectures train in the browser too: linear, mamba, hybrid', async ({ page }) => {
  test.setTimeout(240_000);
  await ready(page);
  const run = { ...TINY_RUN, steps: 8, logInterval: 2, evalInterval: 8, evalBatches: 1, sampleTokens: 0 };
  for (const arch of ['linear', 'mamba', 'hybrid']) {
    await page.getByTestId('field-arch').selectOption(arch);
    await fill(page, run);
    await expect(page.getByTestId('config-errors')).toBeHidden();
    await page.getByTestId('start').click();
    await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 70_000 });
    await expect(page.getByTestId('log')).toContainText(`model: ${arch}`);
    const losses = await page.locator('#log .line.train').evaluateAll((rows) =>
      rows.map((r) => Number((r as HTMLElement).dataset.loss))
    );
    const last = losses.slice(-run.steps / run.logInterval);
    expect(last.every(Number.isFinite), `${arch}: finite losses ${last}`).toBe(true);
    expect(last[0], `${arch} starts near ln(65)`).toBeGreaterThan(3.5);
    expect(last[last.length - 1], `${arch}: the loss falls (${last})`).toBeLessThan(last[0] - 0.1);
  }
  expectNoErrors(page);
});
