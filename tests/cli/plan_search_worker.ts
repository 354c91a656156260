/**
 * Runs `plan --search` lines for tests/cli/plan_search_fuzz.test.ts in a Web Worker, so a line
 * that runs past its bound can be ended (terminate) rather than hold the test: each message is
 * an argv, each reply what the test checks of the outcome.
 */
import { planSearchRun } from '../../src/cli/plan_search.ts';

/** What the fuzz test checks of one line. */
export interface LineOutcome {
  error?: { message: string; plain: boolean };
  result?: {
    enumerated: number;
    valid: number;
    priced: number;
    overMemory: number;
    ranked: number;
    thinned?: { kept: number; most: number };
    text: string;
  };
}

const post = (msg: LineOutcome) => (globalThis as unknown as { postMessage(m: unknown): void }).postMessage(msg);

globalThis.addEventListener('message', async (ev: Event) => {
  let out: LineOutcome;
  try {
    const { text, result: r } = await planSearchRun((ev as MessageEvent<string[]>).data);
    out = {
      result: r && {
        enumerated: r.enumerated,
        valid: r.valid,
        priced: r.priced,
        overMemory: r.overMemory,
        ranked: r.ranked.length,
        thinned: r.thinned,
        text,
      },
    };
  } catch (err) {
    out = { error: { message: String((err as Error)?.message ?? err), plain: (err as Error)?.constructor === Error } };
  }
  post(out);
});
