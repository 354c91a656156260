/**
 * Console errors and uncaught exceptions of the page and its workers, per test: every spec
 * watches them from `beforeEach` and fails a test that saw any.
 */
import { expect, type Page, test } from '@playwright/test';

const problems = new WeakMap<Page, string[]>();

/** Registers the watcher on every test of the calling spec file. */
export function watchConsoleErrors(): void {
  test.beforeEach(({ page }) => {
    const list: string[] = [];
    problems.set(page, list);
    page.on('console', (msg) => {
      if (msg.type() === 'error') list.push(`console: ${msg.text()}`);
    });
    page.on('pageerror', (err) => list.push(`pageerror: ${err.message}`));
    page.on('worker', (w) =>
      w.on('console', (msg) => {
        if (msg.type() === 'error') list.push(`worker console: ${msg.text()}`);
      }));
  });
}

/** Fails unless the page logged no error and threw nothing since the test started. */
export function expectNoErrors(page: Page): void {
  expect(problems.get(page), 'console errors / uncaught exceptions').toEqual([]);
}
