/**
 * Low-communication data parallelism in the demo, end to end in Chromium (SwiftShader WebGPU):
 * the Setup's --sync fields (set from the URL like any plan field, a combination the CLI refuses
 * refused with its message), a 2-rank DiLoCo run that trains, and the Timeline's account of the
 * outer synchronisation read from the run's own trace.
 */
import { expect, test } from '@playwright/test';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';
import { ready, shoot, TINY, trainsToTheEnd } from './page.ts';

watchConsoleErrors();

test(
  'Setup: --sync diloco is a plan field; a dp 2 run syncs every 2 steps and the Timeline shows it',
  async ({ page }, info) => {
    test.setTimeout(150_000);
    const steps = 4;
    await ready(page, `?${TINY}&steps=${steps}&evalInterval=${steps}&world=2&dp=2&sync=diloco&innerSteps=2`);
    await expect(page.getByTestId('par-sync')).toHaveValue('diloco');
    await expect(page.getByTestId('par-innerSteps')).toHaveValue('2');
    await expect(page.getByTestId('plan-info')).toContainText('diloco H 2 · outer lr 0.7 · momentum 0.9');

    // ZeRO shards one optimizer state over the workers; each DiLoCo worker keeps its own: refused.
    await page.getByTestId('par-zero').selectOption('1');
    await expect(page.getByTestId('plan-errors')).toContainText('--sync diloco needs zero 0');
    await expect(page.getByTestId('start')).toBeDisabled();
    await page.getByTestId('par-zero').selectOption('0');
    await expect(page.getByTestId('plan-errors')).toBeHidden();

    await trainsToTheEnd(page, steps);

    // Outer syncs at the end of steps 1 and 3, one allReduce each on each of the 2 ranks.
    await page.getByTestId('tab-timeline').click();
    const summary = page.getByTestId('timeline-summary');
    await expect(summary).toContainText('outer synchronisation: 4 calls on dp[0,1]/outer');
    await shoot(page, info, 'timeline-diloco');
    // The Communication panel names the outer allReduces' bytes; the gradient allReduce of DDP is gone.
    await page.getByTestId('tab-comm').click();
    await expect(page.getByTestId('comm-summary')).toContainText('outer synchronisation');
    expect(Number(await page.getByTestId('comm-summary').getAttribute('data-outer-bytes'))).toBeGreaterThan(0);
    await shoot(page, info, 'communication-diloco');
    expectNoErrors(page);
  },
);
