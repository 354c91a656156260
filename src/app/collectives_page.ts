/**
 * collectives.html: the collective layer's test matrix in the browser. For each world size it
 * launches that many workers/rank.worker.ts module workers through `World.launch({ spawn })`,
 * runs the shared `matrix` scenario (src/comm/scenarios.ts — the same code the Deno tests run)
 * and records each rank's report; then a 4-rank world where rank 0 calls a different collective
 * must fail with both calls named, and a traced ring allReduce must show 2(p−1) sends per rank.
 *
 * Results land in `window.collectiveResults` and the table; `body[data-state]` becomes `done`
 * (or `error` when the page itself failed). e2e/collectives.spec.ts reads them. Query:
 * `?sizes=1,2,3` picks world sizes, `?net=<spec or preset>` the traced run's network model.
 */
import { World } from '../comm/launch.ts';
import type { Report } from '../comm/scenarios.ts';
import { toChromeTrace, traceTotals } from '../comm/trace.ts';
import { spawnRankWorker } from './rank.ts';

/** One row of the page's results. */
export interface CollectiveResult {
  name: string;
  ok: boolean;
  cases: number;
  failures: string[];
  /** The error message of a run expected to fail (or that failed unexpectedly). */
  error?: string;
  ms: number;
}

declare global {
  interface Window {
    collectiveResults?: CollectiveResult[];
  }
}

const rows = document.querySelector<HTMLTableSectionElement>('#rows')!;
const status = document.querySelector<HTMLElement>('#status')!;
const results: CollectiveResult[] = [];
window.collectiveResults = results;

function show(r: CollectiveResult): void {
  results.push(r);
  const tr = document.createElement('tr');
  tr.dataset.testid = `result-${r.name}`;
  tr.className = r.ok ? 'pass' : 'fail';
  const detail = r.ok ? 'pass' : `FAIL: ${r.error ?? r.failures.slice(0, 3).join('; ')}`;
  for (const text of [r.name, detail, String(r.cases), r.ms.toFixed(0)]) {
    const td = document.createElement('td');
    td.textContent = text;
    tr.append(td);
  }
  rows.append(tr);
}

/** Launches a world of `size` rank workers, runs `body`, always shuts it down. */
async function withWorld<T>(size: number, body: (w: World) => Promise<T>, net?: string): Promise<T> {
  const w = await World.launch({ size, spawn: spawnRankWorker, timeoutMs: 20_000, runTimeoutMs: 120_000, net });
  try {
    return await body(w);
  } finally {
    await w.shutdown();
  }
}

async function matrix(size: number): Promise<void> {
  const t0 = performance.now();
  try {
    const reps = await withWorld(size, (w) => w.run<Report>('matrix', null));
    const failures = reps.flatMap((r) => r.failures);
    const cases = Math.min(...reps.map((r) => r.cases));
    show({ name: `world-${size}`, ok: failures.length === 0 && cases > 500, cases, failures, ms: performance.now() - t0 });
  } catch (e) {
    show({ name: `world-${size}`, ok: false, cases: 0, failures: [], error: (e as Error).message, ms: performance.now() - t0 });
  }
}

/** Rank 0 calls reduceScatter where the others call allReduce: must fail naming both. */
async function mismatch(): Promise<void> {
  const t0 = performance.now();
  let error = '';
  try {
    await withWorld(4, (w) => w.run('mismatch', { timeoutMs: 20_000 }));
  } catch (e) {
    error = (e as Error).message;
  }
  const ok = /called (allReduce|reduceScatter)\(sum\/ring, f32×1024\) in group world#1 but rank \d sent (reduceScatter|allReduce)/.test(error);
  show({ name: 'mismatch', ok, cases: 1, failures: ok ? [] : ['no mismatch error'], error, ms: performance.now() - t0 });
}

/**
 * A traced 4-rank ring allReduce on the network of `?net=` (default nvlink-ib): every rank
 * sends 2(p−1) messages. The merged trace.json is offered as a download (opens in Perfetto).
 */
async function trace(net: string): Promise<void> {
  const t0 = performance.now(), p = 4;
  try {
    const spans = await withWorld(p, async (w) => {
      await w.run('one', { coll: 'allReduce', algorithm: 'ring', bytes: 4096 });
      return await w.trace();
    }, net);
    const json = JSON.stringify(toChromeTrace(spans, { run: 'collectives page: ring allReduce', net }));
    const link = document.querySelector<HTMLAnchorElement>('#trace-download')!;
    link.href = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
    link.hidden = false;
    const sends = [...Array(p).keys()].map((r) => spans.filter((s) => s.rank === r && s.kind === 'send').length);
    const totals = traceTotals(spans);
    document.querySelector('#trace-summary')!.textContent = JSON.stringify({ sends, totals }, null, 1);
    const ok = sends.every((n) => n === 2 * (p - 1)) && totals.totalBytes === p * 2 * (p - 1) * 1024;
    show({ name: 'trace', ok, cases: 1, failures: ok ? [] : [`sends per rank ${sends}`], ms: performance.now() - t0 });
  } catch (e) {
    show({ name: 'trace', ok: false, cases: 0, failures: [], error: (e as Error).message, ms: performance.now() - t0 });
  }
}

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const q = params.get('sizes');
  const sizes = q ? q.split(',').map(Number) : [1, 2, 3, 4, 5, 6, 7, 8];
  document.body.dataset.state = 'running';
  for (const n of sizes) {
    status.textContent = `world of ${n}…`;
    await matrix(n);
  }
  status.textContent = 'mismatch…';
  await mismatch();
  status.textContent = 'trace…';
  await trace(params.get('net') ?? 'nvlink-ib');
  const bad = results.filter((r) => !r.ok).length;
  status.textContent = bad ? `${bad} of ${results.length} failed` : `all ${results.length} passed`;
  document.body.dataset.state = 'done';
}

main().catch((e) => {
  status.textContent = `page error: ${(e as Error).message}`;
  document.body.dataset.state = 'error';
});
