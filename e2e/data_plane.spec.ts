/**
 * The data plane in the browser (docs/design.md#the-shared-data-plane-of-worker-ranks): served with COOP/COEP (vite
 * preview) the page is cross-origin isolated and a 2-rank run exchanges tensors through SharedArrayBuffer rings, which
 * its trace records; served without the two headers (stripped here on the way to the page) the same run falls back to
 * MessagePorts and the Setup and the log say why.
 */
import { expect, type Page, test } from '@playwright/test';
import { readFile } from 'node:fs/promises';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';
import { ready, TINY, trainsToTheEnd } from './page.ts';

watchConsoleErrors();

const steps = 2;
const QUERY = `?${TINY}&steps=${steps}&evalInterval=${steps}&world=2&dp=2`;

/** The exported trace's `otherData` (Chrome Trace Event JSON from the Timeline tab). */
async function traceMeta(page: Page): Promise<Record<string, unknown>> {
  await page.getByTestId('tab-timeline').click();
  const download = page.waitForEvent('download');
  await page.getByTestId('export-trace').click();
  return JSON.parse(await readFile((await (await download).path())!, 'utf8')).otherData;
}

test('served with COOP/COEP the page is cross-origin isolated and a 2-rank run uses the shared plane', async ({ page }) => {
  test.setTimeout(150_000);
  await ready(page, QUERY);
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
  await expect(page.getByTestId('data-plane')).toHaveText(
    'data plane: shared (SharedArrayBuffer rings; the page is cross-origin isolated)',
  );
  await trainsToTheEnd(page, steps);
  await expect(page.getByTestId('log')).toContainText('data plane: shared (SharedArrayBuffer rings)');
  expect((await traceMeta(page)).dataPlane).toBe('shared');
  expectNoErrors(page);
});

test('served without the two headers the run uses MessagePorts and says why', async ({ page }) => {
  test.setTimeout(150_000);
  await page.route('**/*', async (route) => {
    const response = await route.fetch();
    const headers = { ...response.headers() };
    delete headers['cross-origin-opener-policy'];
    delete headers['cross-origin-embedder-policy'];
    await route.fulfill({ response, headers });
  });
  await ready(page, QUERY);
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(false);
  const why = /data plane: message \(MessagePorts\), because the page is not cross-origin isolated/;
  await expect(page.getByTestId('data-plane')).toHaveText(why);
  await expect(page.getByTestId('data-plane')).toContainText('Cross-Origin-Embedder-Policy: require-corp');
  await trainsToTheEnd(page, steps);
  await expect(page.getByTestId('log')).toContainText(why);
  expect((await traceMeta(page)).dataPlane).toBe('message');
  expectNoErrors(page);
});
