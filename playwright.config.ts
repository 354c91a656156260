import { defineConfig } from '@playwright/test';

/**
 * End-to-end tests of the browser demo against `vite preview` (the production build).
 * Browsers cannot be downloaded here: the tests use Debian's Chromium, whose WebGPU runs on
 * the CPU through SwiftShader when there is no GPU (README, "No GPU?"). CHROMIUM overrides the path.
 */
const PORT = 4173;

export default defineConfig({
  testDir: 'e2e',
  outputDir: 'test-results',
  timeout: 90_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1, // WebGPU on SwiftShader uses every core; parallel pages only slow each other down
  retries: 0,
  reporter: [['list'], ['html', { open: 'never', outputFolder: 'playwright-report' }]],
  use: {
    baseURL: `http://localhost:${PORT}`,
    viewport: { width: 1280, height: 720 },
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: [
        '--headless=new',
        '--enable-unsafe-webgpu',
        '--no-sandbox',
        // No network on CI machines: keep Chromium's background services quiet.
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic',
      ],
    },
  },
  projects: [{ name: 'chromium' }],
  webServer: {
    command: `npx vite build && npx vite preview --port ${PORT} --strictPort`,
    url: `http://localhost:${PORT}`,
    reuseExistingServer: process.env.E2E_REUSE_SERVER === '1', // default: always test a fresh build
    timeout: 120_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
