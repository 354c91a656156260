/**
 * What the demo's end-to-end specs share: opening the page until it can train, saving a
 * screenshot as a test artifact, and the tiny model SwiftShader trains in about a second per
 * step per rank.
 */
import { expect, type Page, type TestInfo } from '@playwright/test';

/** Opens the demo with `query` (Setup fields and parallel controls) and waits until it can train. */
export async function ready(page: Page, query = ''): Promise<void> {
  await page.goto(`/${query}`);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
}

/** Saves a screenshot of the whole page as `name`.png and attaches it to the report. */
export async function shoot(page: Page, info: TestInfo, name: string): Promise<void> {
  await page.waitForTimeout(300);
  const png = await page.screenshot({ path: info.outputPath(`${name}.png`), timeout: 15_000 });
  await info.attach(name, { body: png, contentType: 'image/png' });
}

/** The tiny model of panels.spec.ts as URL parameters. */
export const TINY =
  'preset=tiny&nLayer=1&nHead=2&nEmbd=32&blockSize=16&batchSize=8&lr=0.01&warmup=2&logInterval=1&evalBatches=1&sampleTokens=0';

/** Presses Start, waits for the run to end and checks it logged `steps` finite training losses. */
export async function trainsToTheEnd(page: Page, steps: number): Promise<void> {
  await page.getByTestId('start').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 140_000 });
  const losses = await page.locator('#log .line.train').evaluateAll((rows) =>
    rows.map((r) => Number((r as HTMLElement).dataset.loss))
  );
  expect(losses.length).toBe(steps);
  for (const l of losses) expect(Number.isFinite(l)).toBe(true);
}
