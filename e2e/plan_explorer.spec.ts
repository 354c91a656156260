/**
 * The Plan explorer tab end to end in Chromium (SwiftShader WebGPU): the performance model's
 * search for a preset on a cluster renders ranked plans whose stacked time bars add up to each
 * plan's predicted step and whose memory bars stay within the device; a model too big for the
 * cluster says no plan fits; and a chosen plan, scaled down to the tiny model, fills the Setup and
 * trains through the page's own parallel run.
 */
import { expect, type Locator, type Page, test } from '@playwright/test';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';
import { ready, shoot, TINY } from './page.ts';

watchConsoleErrors();

/** Numbers of the `data-<key>` attribute of every element `loc` matches. */
const nums = (loc: Locator, key: string) =>
  loc.evaluateAll((els, k) => els.map((e) => Number((e as HTMLElement).dataset[k])), key);

/** Sets the cluster and model controls, searches, and waits for the answer. */
async function search(page: Page, model: string, gpus: number, batch = ''): Promise<void> {
  await page.getByTestId('px-model').selectOption(model);
  await page.getByTestId('px-batch').fill(batch);
  await page.getByTestId('px-world').fill(String(gpus));
  await page.getByTestId('px-device').selectOption('h100-sxm');
  await page.getByTestId('px-net').selectOption('nvlink-ib');
  await page.getByTestId('px-search').click();
  await expect(page.getByTestId('panel-explorer')).not.toHaveAttribute('data-searching', 'true', { timeout: 30_000 });
}

test(
  'Plan explorer: ranked plans as time and memory bars, no plan for a model too big, a scaled-down run trains',
  async ({ page }, info) => {
    test.setTimeout(180_000);
    const steps = 3;
    await ready(page, `?${TINY}&steps=50`);
    await page.getByTestId('tab-explorer').click();

    // Megatron's 1.7B model on 8 H100s: ten plans, fastest first.
    await search(page, 'megatron-1.7b', 8);
    await expect(page.getByTestId('px-error')).toBeHidden();
    const plans = page.getByTestId('px-plan');
    await expect(plans).toHaveCount(10);
    await expect(page.getByTestId('px-status')).toContainText('plans enumerated');
    await expect(page.getByTestId('px-why')).toContainText('why: ');
    const stepTimes = await nums(plans, 'step');
    const slowest = Math.max(...stepTimes);
    for (let i = 0; i < stepTimes.length; i++) {
      if (i) expect(stepTimes[i]).toBeGreaterThanOrEqual(stepTimes[i - 1]);
      const time = plans.nth(i).getByTestId('px-time');
      const total = Number(await time.getAttribute('data-total'));
      expect(total).toBeCloseTo(stepTimes[i], 12);
      const segs = time.locator('.px-seg');
      const seconds = (await nums(segs, 'value')).reduce((a, x) => a + x, 0);
      const widths = (await nums(segs, 'width')).reduce((a, x) => a + x, 0);
      expect(Math.abs(seconds - total) / total).toBeLessThan(1e-9); // compute + exposed comm + bubble + optimizer = the step
      expect(widths).toBeCloseTo((100 * total) / slowest, 6);
      expect(Number(await time.getAttribute('data-width'))).toBeCloseTo(widths, 6);
      const mem = plans.nth(i).getByTestId('px-mem');
      const bytes = (await nums(mem.locator('.px-seg'), 'value')).reduce((a, x) => a + x, 0);
      expect(Math.abs(bytes - Number(await mem.getAttribute('data-total')))).toBeLessThan(1);
      expect(bytes).toBeLessThanOrEqual(Number(await mem.getAttribute('data-capacity')));
    }
    expect(await plans.first().getByTestId('px-time').locator('.px-seg[data-key="compute"]').count()).toBe(1);
    await shoot(page, info, 'explorer-ranked');

    // GPT-3 175B on 8 GPUs: no plan fits, and the page says so.
    await search(page, 'gpt3-175b', 8);
    await expect(page.getByTestId('px-error')).toBeVisible();
    await expect(page.getByTestId('px-error')).toContainText("No plan fits: no plan fits h100-sxm's 80 GiB on 8 ranks");
    await expect(page.getByTestId('px-error')).toContainText('GiB per rank');
    await expect(plans).toHaveCount(0);
    await expect(page.getByTestId('px-run')).toBeHidden();
    await shoot(page, info, 'explorer-no-fit');

    // On 1024 GPUs the best plan needs more ranks than a tab has: the nearest runnable plan is offered.
    await search(page, 'gpt3-175b', 1024);
    await expect(plans).toHaveCount(10);
    await expect(page.getByTestId('px-scale')).toHaveAttribute('data-exact', 'false');
    await expect(page.getByTestId('px-changes')).toContainText('1024 ranks exceed the 8 rank workers of a tab');
    await expect(page.getByTestId('px-start')).toHaveText('Train the nearest plan');

    // 1.7B on 2 GPUs with a global batch of 4: the chosen plan runs as is, on 2 rank workers.
    await search(page, 'megatron-1.7b', 2, '4');
    await expect(plans.first()).toBeVisible();
    const row = plans.filter({ hasText: 'dp 2' }).filter({ hasText: 'm 1 ' }).filter({ hasText: 'recompute none' })
      .first();
    await row.click();
    await expect(row).toHaveAttribute('aria-checked', 'true');
    await expect(page.getByTestId('px-scale')).toHaveAttribute('data-exact', 'true');
    await expect(page.getByTestId('px-scale')).toContainText('on 2 rank workers');
    await page.getByTestId('px-steps').fill(String(steps));
    await page.getByTestId('px-start').click();
    await expect(page.locator('body')).toHaveAttribute('data-state', 'running');
    await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 150_000 });
    await expect(page.getByTestId('px-run-status')).toContainText(`Done: ${steps} steps on 2 ranks`);
    // The Setup holds the plan the run used.
    await expect(page.getByTestId('par-world')).toHaveValue('2');
    await expect(page.getByTestId('par-dp')).toHaveValue('2');
    await expect(page.getByTestId('par-microBatches')).toHaveValue('1');
    await expect(page.getByTestId('field-steps')).toHaveValue(String(steps));
    const losses = await page.locator('#log .line.train').evaluateAll((rows) =>
      rows.map((r) => Number((r as HTMLElement).dataset.loss))
    );
    expect(losses.length).toBe(steps);
    for (const l of losses) expect(Number.isFinite(l)).toBe(true);
    await shoot(page, info, 'explorer-run-done');
    expectNoErrors(page);
  },
);
