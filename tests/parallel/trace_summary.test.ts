/**
 * The communication characterisation (src/perf/trace_summary.ts, `npm run trace -- summary`)
 * on a constructed trace with a known histogram: sends binned by size per collective and per
 * dimension, only wall-clock sends inside steps counted, the shares under 64 KiB by count, bytes
 * and simulated time, bytes per step and rank averaged over the steps, and the CLI's tables
 * beside an accounting.json.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { binLabel, sizeBin, summarizeTrace } from '../../src/perf/trace_summary.ts';
import { SIM_PID, type TraceEvent, WALL_PID } from '../../src/comm/trace.ts';
import { main } from '../../src/cli/trace.ts';

const send = (rank: number, group: string, op: string, bytes: number, step: number | undefined, us: number) => ({
  name: 'send',
  cat: 'send',
  ph: 'X',
  pid: WALL_PID,
  tid: rank,
  ts: 0,
  dur: 1,
  args: {
    op,
    group,
    bytes,
    peer: 1 - rank,
    elements: bytes / 4,
    simStartUs: 10,
    simArrivalUs: 10 + us,
    ...(step === undefined ? {} : { step }),
  },
} as TraceEvent);

/** Rank 0: per step a 2 KiB tp allReduce message and a 100 KiB dp one; one 8 MiB pp send in step 1; noise that must not count. */
function trace() {
  const ev: TraceEvent[] = [];
  for (const step of [0, 1]) {
    ev.push(send(0, 'tp[0,1]/act', 'allReduce', 2048, step, 3));
    ev.push(send(0, 'dp[0,2]/grads', 'allReduce', 100 * 1024, step, 50));
  }
  ev.push(send(0, 'pp[0,1]', 'send', 8 << 20, 1, 1000));
  ev.push(send(0, 'dp[0,2]/eval', 'allGather', 64, undefined, 1)); // between steps: validation
  ev.push({ ...send(0, 'tp[0,1]/act', 'allReduce', 2048, 0, 3), pid: SIM_PID }); // the simulated copy of a span
  ev.push({ ...send(0, 'tp[0,1]/act', 'allReduce', 2048, 0, 3), cat: 'recv' });
  return { traceEvents: ev };
}

Deno.test('trace summary: known histogram, small-message shares and bytes per step', () => {
  equal(sizeBin(1023), 0);
  equal(sizeBin(1024), 1);
  equal(sizeBin(5 << 20), 7);
  deepStrictEqual([0, 1, 7].map(binLabel), ['< 1 KiB', '1 KiB–4 KiB', '≥ 4 MiB']);
  const s = summarizeTrace(trace());
  equal(s.steps, 2);
  deepStrictEqual(s.byCollective.get('allReduce')!.count, [0, 2, 0, 0, 2, 0, 0, 0]);
  deepStrictEqual(s.byCollective.get('send')!.count, [0, 0, 0, 0, 0, 0, 0, 1]);
  deepStrictEqual(s.byDim.get('tp')!.simUs, [0, 6, 0, 0, 0, 0, 0, 0]);
  deepStrictEqual([...s.byDim.keys()].sort(), ['dp', 'pp', 'tp']);
  const bytes = 2 * 2048 + 2 * 102400 + (8 << 20);
  equal(s.small.count, 2 / 5);
  equal(s.small.bytes, (2 * 2048) / bytes);
  equal(s.small.time, 6 / (6 + 100 + 1000));
  deepStrictEqual(s.bytesPerStep.get(0), { 'tp/allReduce': 2048, 'dp/allReduce': 102400, 'pp/send': (8 << 20) / 2 });
  throws(() => summarizeTrace({}), /no traceEvents array/);
  throws(
    () => summarizeTrace({ traceEvents: [send(0, 'x', 'send', NaN, 0, 1)].map((e) => ({ ...e, args: { step: 0 } })) }),
    /send event 0 has no bytes/,
  );
});

Deno.test('npm run trace -- summary: tables per collective and dimension, beside accounting.json', async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/trace.json`, JSON.stringify(trace()));
  const accounting = { ranks: [{ rank: 0, traffic: [{ key: 'tp/allReduce', predicted: 512 }] }] };
  await Deno.writeTextFile(`${dir}/accounting.json`, JSON.stringify(accounting));
  const log = console.log;
  console.log = () => {};
  try {
    const out = (await main(['summary', dir]))!;
    ok(out.includes('2 steps'), out);
    ok(/^allReduce\s+0\s+2\s+0\s+0\s+2\s+0\s+0\s+0\s+204\.0 KiB/m.test(out), out);
    ok(out.includes('under 64 KiB: 40.0% of messages'), out);
    ok(/^0\s+tp\/allReduce\s+2\.0 KiB\s+2\.0 KiB$/m.test(out), 'measured beside predicted (512 elements = 2 KiB)');
    await Deno.remove(`${dir}/accounting.json`);
    ok(!(await main(['summary', `${dir}/trace.json`]))!.includes('predicted'));
  } finally {
    console.log = log;
  }
  let err = '';
  try {
    await main(['sumary', dir]);
  } catch (e) {
    err = (e as Error).message;
  }
  ok(err.includes("expected 'summary <run dir | trace.json>'"), err);
});
