/**
 * WebGPU detection on the page and the explanation shown when it is missing, so a browser
 * without WebGPU gets a readable page instead of a blank screen.
 */

/** Why the demo cannot run. */
export type Unsupported =
  | { reason: 'no-api' }
  | { reason: 'no-adapter'; detail?: string }
  | { reason: 'error'; detail: string };

/**
 * Checks that the page can reach WebGPU at all. The device itself is opened in the rank
 * worker; this only rules out a browser without `navigator.gpu`.
 */
export function checkWebGpuApi(): Unsupported | null {
  if (!('gpu' in navigator) || !navigator.gpu) return { reason: 'no-api' };
  if (!window.isSecureContext) return { reason: 'error', detail: 'WebGPU needs a secure context: open the demo over https:// or http://localhost.' };
  return null;
}

/** Classifies an error from the worker's init (device opening, data fetch). */
export function classifyInitError(message: string): Unsupported {
  if (/no WebGPU adapter|gave no adapter|navigator\.gpu is undefined|has no WebGPU/i.test(message)) {
    return /navigator\.gpu is undefined|has no WebGPU/i.test(message) ? { reason: 'no-api' } : { reason: 'no-adapter', detail: message };
  }
  return { reason: 'error', detail: message };
}

const HEADLINE: Record<Unsupported['reason'], string> = {
  'no-api': 'This browser does not offer WebGPU',
  'no-adapter': 'WebGPU is present, but no GPU adapter is available',
  error: 'The demo could not start',
};

/** Fills `section` with the explanation for `why` and shows it. */
export function renderUnsupported(section: HTMLElement, why: Unsupported): void {
  section.querySelector('[data-slot="headline"]')!.textContent = HEADLINE[why.reason];
  const detail = section.querySelector<HTMLElement>('[data-slot="detail"]')!;
  const text = 'detail' in why && why.detail ? why.detail : why.reason === 'no-api' ? 'navigator.gpu is undefined in this browser.' : '';
  detail.textContent = text;
  detail.hidden = !text;
  section.dataset.reason = why.reason;
  section.hidden = false;
  section.querySelector<HTMLElement>('h1')?.focus();
}
