/**
 * The parallelism panels end to end in Chromium (SwiftShader WebGPU): a 2-rank data-parallel
 * run of a tiny GPT whose loss falls and whose trace shows allReduce calls; a pipeline run whose
 * timeline shows send/recv messages and idle bubbles; an invalid parallel plan that starts
 * nothing; the Learn lessons driven by a real traced allReduce; a headless run's files opened.
 * Every panel is screenshotted as a test artifact (test-results/…/<panel>.png), and any
 * console error fails the test.
 */
import { expect, type Page, test, type TestInfo } from '@playwright/test';
import { expectNoErrors, watchConsoleErrors } from './console_errors.ts';
import { fileURLToPath } from 'node:url';

watchConsoleErrors();

/** Opens the demo with `query` (Setup fields and parallel controls) and waits until it can train. */
async function ready(page: Page, query = ''): Promise<void> {
  await page.goto(`/${query}`);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
}

/** Shows a view tab and saves a screenshot of the whole page as `name`.png. */
async function shoot(page: Page, info: TestInfo, tab: string, name: string): Promise<void> {
  await page.getByTestId(`tab-${tab}`).click();
  await page.waitForTimeout(400); // charts and canvases redraw on the next frames
  const png = await page.screenshot({ path: info.outputPath(`${name}.png`), timeout: 15_000 });
  await info.attach(name, { body: png, contentType: 'image/png' });
}

/** A model SwiftShader trains in about a second per step per rank. */
const TINY =
  'preset=tiny&nLayer=1&nHead=2&nEmbd=32&blockSize=16&batchSize=8&lr=0.01&warmup=2&logInterval=1&evalBatches=1&sampleTokens=0';

/** Loss values from the log (one line per step). */
const losses = (page: Page) =>
  page.locator('#log .line.train').evaluateAll((rows) => rows.map((r) => Number((r as HTMLElement).dataset.loss)));

test('a 2-rank data-parallel run trains, and every view shows it', async ({ page }, info) => {
  test.setTimeout(150_000);
  const steps = 8;
  await ready(page, `?${TINY}&steps=${steps}&evalInterval=${steps}&world=2&dp=2`);
  await expect(page.getByTestId('plan-errors')).toBeHidden();
  await expect(page.getByTestId('plan-info')).toContainText('dp 2 · pp 1');
  await page.getByTestId('start').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'running');
  // Pause (pressed while the ranks still compile) holds the run after its first step; Step runs exactly one more.
  await page.getByTestId('pause').click();
  await expect(page.getByTestId('status')).toContainText(/paused after step 0/i, { timeout: 110_000 });
  await page.waitForTimeout(1500);
  await expect(page.locator('#log .line.train')).toHaveCount(1);
  await page.getByTestId('step').click();
  await expect(page.getByTestId('status')).toContainText(/paused after step 1/i, { timeout: 20_000 });
  await page.waitForTimeout(1000);
  await expect(page.locator('#log .line.train')).toHaveCount(2);
  await expect(page.getByTestId('pause')).toHaveText('Resume');
  await page.getByTestId('pause').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 60_000 });
  const l = await losses(page);
  expect(l.length).toBe(steps);
  for (const x of l) expect(Number.isFinite(x)).toBe(true);
  expect(l[0]).toBeGreaterThan(3.5); // ≈ ln(65) at initialisation
  expect(l[l.length - 1]).toBeLessThan(l[0] - 0.2);
  await expect(page.getByTestId('metric-val')).toHaveText(/^\d+\.\d{4}$/); // rank 0 evaluates a replicated model
  await shoot(page, info, 'run', 'training');

  await page.getByTestId('tab-timeline').click();
  const summary = page.getByTestId('timeline-summary');
  await expect(summary).toContainText('2 ranks');
  expect(await summary.getAttribute('data-ops')).toContain('collective:allReduce');
  expect(Number(await summary.getAttribute('data-compute'))).toBeGreaterThan(0);
  expect(Number(await summary.getAttribute('data-comm'))).toBeGreaterThan(0);
  await shoot(page, info, 'timeline', 'timeline-dp2');
  // The simulated clock (network model) shows the same spans in µs.
  await page.getByTestId('timeline-clock').selectOption('sim');
  await expect(summary).toContainText('µs');
  await page.getByTestId('timeline-clock').selectOption('wall');
  // Hovering a lane names what is under the pointer.
  const box = (await page.getByTestId('timeline-canvas').boundingBox())!;
  await page.mouse.move(box.x + box.width * 0.5, box.y + 22 + 12);
  await expect(page.getByTestId('timeline-tip')).toBeVisible();
  await expect(page.getByTestId('timeline-tip')).toContainText(/ms at /);
  // The trace exports as Chrome Trace Event JSON.
  const download = page.waitForEvent('download');
  await page.getByTestId('export-trace').click();
  const { readFile } = await import('node:fs/promises');
  const trace = JSON.parse(await readFile((await (await download).path())!, 'utf8'));
  expect(trace.traceEvents.filter((e: { ph: string }) => e.ph === 'X').length).toBeGreaterThan(10);

  await page.getByTestId('tab-comm').click();
  const heat = page.getByTestId('comm-heatmap');
  expect(Number(await heat.locator('td[data-bytes]').nth(1).getAttribute('data-bytes'))).toBeGreaterThan(0); // 0 → 1
  await expect(page.getByTestId('comm-totals').locator('tr[data-op="allReduce"]')).toBeVisible();
  await shoot(page, info, 'comm', 'communication');
  await page.getByTestId('tab-memory').click();
  await expect(page.getByTestId('memory-bars').getByTestId('mem-measured')).toHaveCount(2);
  await shoot(page, info, 'memory', 'memory');
  await page.getByTestId('tab-mesh').click();
  await expect(page.getByTestId('mesh-status')).toHaveAttribute('data-ready', 'true');
  await page.getByTestId('mesh-replay').click();
  await shoot(page, info, 'mesh', 'mesh');
  expectNoErrors(page);
});

test('a dp 2 × pp 2 run shows allReduce, send/recv and idle bubbles in the timeline', async ({ page }, info) => {
  test.setTimeout(240_000);
  const steps = 2;
  await ready(
    page,
    `?${TINY}&nLayer=2&steps=${steps}&evalInterval=${steps}&world=4&dp=2&pp=2&microBatches=4&schedule=gpipe`,
  );
  await expect(page.getByTestId('plan-errors')).toBeHidden();
  await page.getByTestId('start').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'done', { timeout: 230_000 });
  expect((await losses(page)).length).toBe(steps);
  await page.getByTestId('tab-timeline').click();
  const summary = page.getByTestId('timeline-summary');
  await expect(summary).toContainText('4 ranks');
  const ops = (await summary.getAttribute('data-ops')) ?? '';
  expect(ops).toContain('collective:allReduce');
  expect(ops).toContain('send:send');
  expect(ops).toContain('recv:send');
  expect(Number(await summary.getAttribute('data-idle'))).toBeGreaterThan(steps); // bubbles in every step
  await shoot(page, info, 'timeline', 'timeline-dp2pp2');
  await page.getByTestId('tab-comm').click();
  await expect(page.getByTestId('comm-totals').locator('tr[data-op="send"]')).toBeVisible();
  await shoot(page, info, 'comm', 'communication-dp2pp2');
  await page.getByTestId('tab-mesh').click();
  await expect(page.getByTestId('mesh-status')).toContainText('dp 2 × pp 2');
  await page.getByTestId('mesh-replay').click();
  await page.waitForTimeout(1500); // links light up during the replay
  await shoot(page, info, 'mesh', 'mesh-dp2pp2');
  expectNoErrors(page);
});

test('Stop ends a parallel run early and keeps its trace', async ({ page }) => {
  test.setTimeout(150_000);
  await ready(page, `?${TINY}&steps=500&evalInterval=500&world=2&dp=2`);
  await page.getByTestId('start').click();
  await expect(page.locator('#log .line.train').nth(2)).toBeAttached({ timeout: 120_000 });
  await page.getByTestId('stop').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'stopped', { timeout: 20_000 });
  const n = await page.locator('#log .line.train').count();
  expect(n).toBeGreaterThanOrEqual(3);
  expect(n).toBeLessThan(500);
  await expect(page.getByTestId('status')).toContainText(`Stopped: ${n} steps on 2 ranks`);
  await expect(page.getByTestId('start')).toBeEnabled();
  await page.getByTestId('tab-timeline').click();
  await expect(page.getByTestId('timeline-summary')).toContainText('2 ranks');
  expectNoErrors(page);
});

test('an invalid parallel plan shows the CLI message and starts nothing', async ({ page }, info) => {
  await ready(page, `?${TINY}&steps=4`);
  await page.getByTestId('par-world').fill('2');
  await expect(page.getByTestId('plan-errors')).toContainText('world size 2 ≠ dp·pp·cp·tp = 1·1·1·1 = 1');
  await page.getByTestId('par-tp').fill('3');
  await expect(page.getByTestId('plan-errors')).toContainText('nEmbd 32 is not divisible by tp 3');
  await expect(page.getByTestId('plan-errors')).toContainText('heads 2 not divisible by tp 3');
  await expect(page.getByTestId('par-tp')).toHaveAttribute('aria-invalid', 'true');
  await expect(page.getByTestId('start')).toBeDisabled();
  await page.getByTestId('par-tp').press('Enter');
  await page.waitForTimeout(300);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(page.locator('#log .line.train')).toHaveCount(0);
  await page.getByTestId('par-zero').selectOption('2');
  await expect(page.getByTestId('plan-errors')).toContainText(
    'zero 2 shards over the dp·cp group and requires dp·cp > 1',
  );
  await page.getByTestId('plan-errors').evaluate((e) => e.scrollIntoView({ block: 'center' }));
  await expect(page.getByTestId('status')).toContainText('Cannot start: invalid parallel plan');
  const png = await page.screenshot({ path: info.outputPath('plan-errors.png') });
  await info.attach('plan-errors', { body: png, contentType: 'image/png' });
  // Each field is checked by the CLI's PlanSchema, its problem said in words; its choices and hint come from it too.
  await page.getByTestId('par-dp').fill('0');
  await expect(page.getByTestId('plan-errors')).toContainText("dp must be a whole number from 1 to 4096, got '0'");
  await expect(page.getByTestId('par-dp')).toHaveAttribute('aria-invalid', 'true');
  await page.getByTestId('par-dp').fill('1');
  await expect(page.getByTestId('par-ppSchedule').locator('option')).toHaveText([
    'gpipe',
    '1f1b',
    'interleaved',
    'zb-h1',
  ]);
  await expect(page.locator('#p-microBatches-hint')).toContainText('(unset: gradAccum)');
  await expect(page.getByTestId('par-microBatches')).toHaveAttribute('placeholder', 'gradAccum (1)');
  await page.getByTestId('par-tp').fill('2');
  await page.getByTestId('par-zero').selectOption('0');
  await expect(page.getByTestId('plan-errors')).toBeHidden();
  await expect(page.getByTestId('start')).toBeEnabled();
  // A text file of one's own replaces the corpus: its characters become the vocabulary.
  await page.getByTestId('dataset').selectOption('file');
  const text = 'to be or not to be, that is the question\n'.repeat(200);
  await page.getByTestId('dataset-file').setInputFiles({
    name: 'hamlet.txt',
    mimeType: 'text/plain',
    buffer: Buffer.from(text),
  });
  await expect(page.getByTestId('dataset-note')).toHaveText(
    `${text.length.toLocaleString('en')} characters · vocabulary of ${new Set(text).size} characters`,
  );
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(page.getByTestId('log')).toContainText('data: hamlet.txt');
  expectNoErrors(page);
});

test('Learn: a real ring allReduce replayed chunk by chunk, GPipe vs 1F1B, a TP layer', async ({ page }, info) => {
  test.setTimeout(90_000);
  await ready(page, `?${TINY}`);
  // The view tabs follow the ARIA tabs pattern: arrow keys move between them.
  await page.getByTestId('tab-run').focus();
  await page.keyboard.press('ArrowRight');
  await expect(page.getByTestId('tab-timeline')).toHaveAttribute('aria-selected', 'true');
  await expect(page.getByTestId('tab-timeline')).toBeFocused();
  await page.keyboard.press('End');
  await expect(page.getByTestId('panel-open')).toBeVisible();
  await page.getByTestId('tab-learn').click();
  await page.getByTestId('ring-run').click();
  await expect(page.getByTestId('ring-caption')).toContainText('Before the call', { timeout: 40_000 });
  const board = page.getByTestId('ring-board');
  for (let k = 1; k <= 6; k++) {
    await page.getByTestId('ring-next').click();
    await expect(board).toHaveAttribute('data-step', String(k));
    if (k === 3) await expect(board.locator('.ring-chunk[data-count="4"]')).toHaveCount(4); // reduce-scatter done: one full chunk per rank
  }
  await expect(board.locator('.ring-chunk[data-count="4"]')).toHaveCount(16);
  await expect(page.getByTestId('ring-caption')).toContainText('every rank holds the full sum');
  await page.getByTestId('ring-next').focus(); // keyboard reachable
  await shoot(page, info, 'learn', 'learn-ring');
  await page.getByTestId('tab-pipe').click();
  for (let k = 0; k < 5; k++) await page.getByTestId('pipe-next').click();
  await expect(page.getByTestId('pipe-view').locator('.pipe-run')).toHaveCount(2);
  await expect(page.getByTestId('pipe-caption')).toContainText('stage 0');
  await shoot(page, info, 'learn', 'learn-pipeline');
  await page.getByTestId('tab-tp').click();
  for (let k = 0; k < 4; k++) await page.getByTestId('tp-next').press('Enter');
  await expect(page.getByTestId('tp-caption')).toContainText('allReduce');
  await expect(page.getByTestId('tp-source')).toContainText('allReduce');
  await shoot(page, info, 'learn', 'learn-tp');
  expectNoErrors(page);
});

test(
  'Open run: a headless run’s metrics.jsonl and trace.json fill the charts and the timeline',
  async ({ page }, info) => {
    await ready(page);
    await page.getByTestId('tab-open').click();
    const dir = fileURLToPath(new URL('./fixtures/', import.meta.url));
    await page.getByTestId('open-files').setInputFiles([
      `${dir}metrics.jsonl`,
      `${dir}trace.json`,
      `${dir}config.json`,
    ]);
    await expect(page.getByTestId('open-status')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('open-status')).toContainText(
      '4 train steps, 0 validation points · 928 trace spans on 4 ranks · the config',
    );
    await shoot(page, info, 'open', 'open-run');
    await shoot(page, info, 'run', 'open-run-training');
    await expect(page.locator('#log .line.train')).toHaveCount(4); // the fixture's 4 steps (dp 2 × pp 2, e2e/fixtures/README.md)
    await expect(page.getByTestId('metric-step')).toHaveText('4');
    await page.getByTestId('tab-timeline').click();
    const summary = page.getByTestId('timeline-summary');
    await expect(summary).toContainText('4 ranks');
    const ops = (await summary.getAttribute('data-ops')) ?? '';
    expect(ops).toContain('collective:allReduce');
    expect(ops).toContain('send:send');
    expect(Number(await summary.getAttribute('data-idle'))).toBeGreaterThan(0);
    await shoot(page, info, 'timeline', 'open-run-timeline');
    // With config.json the plan's prediction stands beside the measured traffic: equal, byte for byte.
    await page.getByTestId('tab-comm').click();
    for (const op of ['allReduce', 'send']) {
      await expect(
        page.getByTestId('comm-totals').locator(`tr[data-op="${op}"] td`).nth(4),
      ).toHaveText('1.000');
    }
    await shoot(page, info, 'comm', 'open-run-comm');
    await page.getByTestId('tab-memory').click();
    await expect(page.getByTestId('memory-bars').getByTestId('mem-formula')).toHaveCount(4);
    await page.getByTestId('tab-mesh').click();
    await expect(page.getByTestId('mesh-status')).toContainText('dp 2 × pp 2 × cp 1 × tp 1');
    await page.getByTestId('mesh-replay').click();
    await shoot(page, info, 'mesh', 'open-run-mesh');
    // The example run shipped with the site opens the same way.
    await page.getByTestId('tab-open').click();
    await page.getByTestId('open-example').click();
    await expect(page.getByTestId('open-status')).toContainText('Loaded metrics.jsonl + trace.json + config.json');
    expectNoErrors(page);
  },
);
