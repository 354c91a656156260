/**
 * Compression-assisted collectives in the demo, end to end in Chromium (SwiftShader WebGPU): the
 * Setup's compression field (a policy the CLI accepts, the CLI's message for one it refuses), a
 * 2-rank run that trains under dp=topk:0.1 with the Communication panel's raw / compressed /
 * measured bytes per dimension, and the Learn lesson replaying a real compressed allReduce whose
 * residuals change step to step and whose rendered sums obey error feedback's invariant.
 */
import { expect, type Locator, type Page, test } from '@playwright/test';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';
import { ready, shoot, TINY, trainsToTheEnd } from './page.ts';

watchConsoleErrors();

/** The numbers of a rendered row's data attributes. */
const num = async (row: Locator, key: string) => Number(await row.getAttribute(`data-${key}`));

test(
  'Setup: a compression policy is checked, shown per dimension, and a dp 2 run trains compressed',
  async ({ page }, info) => {
    test.setTimeout(150_000);
    const steps = 3;
    await ready(page, `?${TINY}&steps=${steps}&evalInterval=${steps}&world=2&dp=2`);
    const field = page.getByTestId('par-compress');
    await expect(field).toHaveValue('none');
    await expect(page.locator('label[for="p-compress"]')).toHaveText('Compression');
    await expect(page.locator('#p-compress-list option[value="dp=topk:0.1"]')).toHaveCount(1);
    // Without compression the Communication panel is as before.
    await page.getByTestId('tab-comm').click();
    await expect(page.getByTestId('comm-compress')).toBeHidden();
    await page.getByTestId('tab-run').click();

    // A policy the CLI refuses: its message, the field marked, nothing can start.
    await field.fill('dp=zip');
    await expect(page.getByTestId('plan-errors')).toContainText(
      "compress 'dp=zip': unknown scheme 'zip' (allowed: none,",
    );
    await expect(field).toHaveAttribute('aria-invalid', 'true');
    await expect(page.getByTestId('start')).toBeDisabled();
    await field.evaluate((e) => e.scrollIntoView({ block: 'center' }));
    await shoot(page, info, 'setup-compress-error');
    await field.fill('tp=powersgd');
    await expect(page.getByTestId('plan-errors')).toContainText('PowerSGD compresses dp gradient matrices only');
    await field.fill('dp=topk:0.1');
    await expect(page.getByTestId('plan-errors')).toBeHidden();
    await expect(field).not.toHaveAttribute('aria-invalid', 'true');
    await expect(page.getByTestId('plan-info')).toContainText('compress dp=topk:0.1');
    await expect(page.getByTestId('start')).toBeEnabled();

    // Before the run: the prediction of one step on every rank, raw against compressed.
    await page.getByTestId('tab-comm').click();
    const dp = page.getByTestId('comm-compress').locator('tr[data-dim="dp"]');
    await expect(dp).toBeVisible();
    await expect(dp.locator('td').nth(1)).toHaveText('topk:0.1');
    const raw1 = await num(dp, 'raw'), packed1 = await num(dp, 'compressed');
    expect(packed1).toBeGreaterThan(0);
    expect(raw1 / packed1).toBeGreaterThan(3); // top-k 10 % sends index + value: ≈ 5× fewer words on the gradients
    await expect(dp.locator('td').nth(5)).toHaveText('—');

    await page.getByTestId('tab-run').click();
    await trainsToTheEnd(page, steps);

    // After it: every step of every rank, predicted raw and compressed, and the trace's bytes equal to the compressed.
    await page.getByTestId('tab-comm').click();
    await expect(dp.locator('td').nth(5)).not.toHaveText('—');
    expect(await num(dp, 'raw')).toBe(steps * raw1);
    expect(await num(dp, 'compressed')).toBe(steps * packed1);
    expect(await num(dp, 'measured')).toBe(await num(dp, 'compressed'));
    await expect(dp.locator('td').nth(6)).toHaveText('1.000');
    // The compressed allReduce runs as an allToAll and an allGather of compressed chunks.
    await expect(page.getByTestId('comm-totals').locator('tr[data-op="allToAll"]')).toBeVisible();
    await shoot(page, info, 'communication-compressed');
    expectNoErrors(page);
  },
);

/** The four numbers of an invariant part: Σ sent (or outputs), + residual, =, Σ inputs. */
const sums = async (page: Page, id: string) => (await page.getByTestId(id).locator('b').allTextContents()).map(Number);

/** The e₁ column of rank r as rendered. */
const residuals = (page: Page, r: number) =>
  page.locator(`[data-testid="cmp-board"] td[data-col="e1-${r}"]`).allTextContents();

test('Learn: a real compressed allReduce with error feedback, replayed step by step', async ({ page }, info) => {
  test.setTimeout(90_000);
  await ready(page, `?${TINY}`);
  await page.getByTestId('tab-learn').click();
  await page.getByTestId('tab-compress').click();
  await page.getByTestId('cmp-run').click();
  const caption = page.getByTestId('cmp-caption');
  await expect(caption).toContainText('Step 1 of 5 (topk:0.1)', { timeout: 40_000 });
  // 24 values on 2 ranks: chunks of 12, top-k keeps 2 of each, 2 words apiece (index + value), from the trace.
  await expect(caption).toContainText('rank 0 8 (4 allToAll + 4 allGather), rank 1 8 (4 allToAll + 4 allGather)');
  await expect(caption).toContainText('sends 24 per rank');
  const board = page.getByTestId('cmp-board');
  await expect(board.locator('tbody tr')).toHaveCount(24);
  await expect(board.locator('td.kept')).toHaveCount(8); // 2 ranks × 2 chunks × k = 2

  const seen: string[][] = [];
  for (let k = 1; k <= 5; k++) {
    if (k > 1) await page.getByTestId('cmp-next').click();
    await expect(board).toHaveAttribute('data-step', String(k));
    const e = await residuals(page, 0);
    expect(e.some((v) => Number(v) !== 0)).toBe(true);
    seen.push(e);
    // Σ sent + residual = Σ inputs, per rank and for the whole call, in the numbers the page shows (4 decimals).
    for (const id of ['inv-rank-0', 'inv-rank-1', 'inv-call']) {
      const [sent, res, total, inputs] = await sums(page, id);
      expect(Math.abs(sent + res - inputs)).toBeLessThan(5e-4);
      expect(Math.abs(total - inputs)).toBeLessThan(2e-4);
    }
    expect(Number(await page.getByTestId('cmp-invariant').getAttribute('data-gap'))).toBeLessThan(1e-4);
  }
  for (let k = 1; k < 5; k++) expect(seen[k], `residual after step ${k + 1} vs ${k}`).not.toEqual(seen[k - 1]);
  // The slider goes back to any step.
  await page.getByTestId('cmp-step').fill('2');
  await expect(board).toHaveAttribute('data-step', '2');
  expect(await residuals(page, 0)).toEqual(seen[1]);
  await shoot(page, info, 'learn-compress');

  // sign: one bit a value plus a scale, so every value is sent and all carry a residual.
  await page.getByTestId('cmp-scheme').selectOption('sign');
  await page.getByTestId('cmp-run').click();
  await expect(caption).toContainText('Step 1 of 5 (sign)', { timeout: 40_000 });
  await expect(caption).toContainText('rank 0 4 (2 allToAll + 2 allGather)');
  const [sent, res, , inputs] = await sums(page, 'inv-rank-1');
  expect(Math.abs(sent + res - inputs)).toBeLessThan(5e-4);
  expectNoErrors(page);
});
