/**
 * The Plan explorer's search, off the main thread: a 1024-rank search enumerates about a million
 * plans (≈ 2 s here), which would freeze the page. Messages in: `{ id, spec }` (an ExplorerSpec);
 * out: `{ id, result }` (an ExplorerResult, plain data) — or `{ id, result: { ok: false, … } }`
 * when the search itself throws.
 */
import { type ExplorerSpec, explorePlans } from './panels/plan_explore.ts';

const post = (msg: unknown) => (globalThis as unknown as { postMessage(m: unknown): void }).postMessage(msg);

globalThis.addEventListener('message', (ev: Event) => {
  const { id, spec } = (ev as MessageEvent<{ id: number; spec: ExplorerSpec }>).data;
  try {
    post({ id, result: explorePlans(spec) });
  } catch (e) {
    post({ id, result: { ok: false, message: `search failed: ${(e as Error).message}`, noFit: false } });
  }
});
