/**
 * Fuzzes `npm run plan -- --search` (seeded; FUZZ_SEED=n explores others) through the CLI's own
 * entry, planSearchRun: worlds up to the maximum with many divisors, presets and dimensions,
 * global batches up to 2^24 (powers of two and highly composite ones), negative and huge values.
 * Every line is either one Error naming what is wrong, or an answer whose work is bounded: at
 * most MAX_PRICED_PLANS plans priced (the exact condition), said when the micro-batch counts were
 * thinned, and — a generous bound, not a speed target — within two minutes of wall time, which a
 * search whose divisor list is as long as the batch (the defect) runs far past. Lines run in a
 * worker (plan_search_worker.ts) that is ended at that bound, so such a line fails the test
 * instead of holding it.
 */
import { equal, ok } from 'node:assert/strict';
import type { LineOutcome } from './plan_search_worker.ts';
import { parseDecimal } from '../../src/cli/flags.ts';
import { MAX_PRICED_PLANS } from '../../src/perf/plan_space.ts';
import { Random } from '../../src/util/random.ts';

const SEED = parseDecimal(Deno.env.get('FUZZ_SEED') ?? '') ?? 0x5eed;
const LINES = 16;
/** Seconds a line may take: far above any bounded search on a loaded 2-core machine. */
const GENEROUS_S = 120;

const WORLDS = ['1', '2', '7', '8', '12', '64', '96', '1000', '1024', '5040', '55440', '65536', '65537', '0', '-8'];
const BATCHES = ['1', '7', '512', '1536', '720720', '8648640', '14414400', '16777216', '16777217', '-1', '0x10'];
const MODELS = [
  'gpt3-175b',
  'llama2-70b',
  'megatron-1.7b',
  'megatron-1t',
  'layers=24,heads=24,hidden=2304,seq=2048,vocab=51200',
  'layers=840,heads=720,hidden=46080,seq=5040,vocab=512,batch=720720',
  'layers=2,heads=4,hidden=64,seq=32,vocab=65,batch=16777216',
  'layers=-2,heads=4,hidden=64,seq=32,vocab=65',
  'gpt5',
];

/** One random `--search` line. */
function randomLine(r: Random): string[] {
  const pick = <T>(xs: readonly T[]) => xs[r.int(xs.length)];
  const argv = ['--search', '--world', pick(WORLDS), '--model', pick(MODELS)];
  if (r.int(3)) argv.push('--global-batch', pick(BATCHES));
  if (r.int(2)) argv.push('--dtype', pick(['bf16', 'f32']));
  if (r.int(3) === 0) argv.push('--attention', 'naive');
  if (r.int(3) === 0) argv.push('--device', pick(['a100-80g', 'mi250x', 'cpu-lavapipe']));
  if (r.int(4) === 0) argv.push('--top', pick(['1', '3', '1000']));
  return argv;
}

/** The user's line (2^24 sequences on 1024 ranks) and the widest thinned one, then the seeded lines. */
function lines(): string[][] {
  const r = new Random(SEED),
    out = [
      ['--search', '--world', '1024', '--model', 'gpt3-175b', '--global-batch', '16777216'],
      ['--search', '--world', '65536', '--model', 'gpt3-175b', '--global-batch', '16777216'],
    ];
  while (out.length < LINES) out.push(randomLine(r));
  return out;
}

/** Runs `argv` in the worker; undefined when it runs past `seconds` (the worker is then ended). */
function runLine(worker: { w: Worker }, argv: string[], seconds: number): Promise<LineOutcome | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      worker.w.terminate();
      worker.w = newWorker();
      resolve(undefined);
    }, seconds * 1e3);
    worker.w.onmessage = (e: MessageEvent<LineOutcome>) => {
      clearTimeout(timer);
      resolve(e.data);
    };
    worker.w.postMessage(argv);
  });
}

const newWorker = () => new Worker(new URL('./plan_search_worker.ts', import.meta.url), { type: 'module' });

Deno.test(`plan --search fuzz: ${LINES} lines each answer with bounded work or one error naming the problem`, async () => {
  const worker = { w: newWorker() };
  let answered = 0, refused = 0, thinned = 0, slowest = { s: 0, line: '' };
  try {
    for (const argv of lines()) {
      const line = argv.join(' '), t0 = performance.now();
      const outcome = await runLine(worker, argv, GENEROUS_S);
      const s = (performance.now() - t0) / 1e3;
      if (s > slowest.s) slowest = { s, line };
      ok(outcome, `${line}: still running after ${GENEROUS_S} s, far past any bounded search`);
      const { error, result: res } = outcome;
      if (error) {
        ok(error.plain, `${line}: ${error.message}`);
        ok(!error.message.includes('\n'), `${line}: one line: ${error.message}`);
        ok(
          /--world|--global-batch|--model|model|--search|no valid plan|no plan fits|the search would price/.test(
            error.message,
          ),
          `${line}: the error names what is wrong: ${error.message}`,
        );
        refused++;
        continue;
      }
      ok(res, line);
      ok(res.priced <= MAX_PRICED_PLANS, `${line}: priced ${res.priced} > ${MAX_PRICED_PLANS}`);
      equal(res.overMemory + res.ranked, res.priced, `${line}: every priced plan is dropped or ranked`);
      ok(res.priced <= res.valid && res.valid <= res.enumerated, line);
      if (res.thinned) {
        ok(res.priced < res.valid && res.thinned.kept < res.thinned.most, line);
        ok(res.text.includes(`thinned  micro-batch counts: ${res.thinned.kept} of up to ${res.thinned.most}`), line);
        thinned++;
      } else {
        equal(res.priced, res.valid, line);
        ok(!res.text.includes('thinned'), line);
      }
      answered++;
    }
  } finally {
    worker.w.terminate();
  }
  console.log(
    `seed ${SEED}: ${answered} answered (${thinned} thinned), ${refused} refused; slowest ${
      slowest.s.toFixed(1)
    } s: ${slowest.line}`,
  );
  ok(answered >= 3 && refused >= 3 && thinned >= 1, `every outcome exercised: ${answered}, ${refused}, ${thinned}`);
});
