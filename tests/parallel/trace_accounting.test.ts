/**
 * The contract of docs/design.md#the-correctness-contract-of-a-parallel-plan: the bytes each run's trace records per
 * step equal the analytical formula for the algorithm used, exactly, counted in elements. Every strategy runs 2 steps
 * through src/parallel/run/run_tasks.ts trainRank (what the CLI's workers run), its ranks' spans are merged into the
 * Chrome trace trace.json holds, read back with src/comm/trace_bytes.ts, and for every rank and step the elements per
 * collective must equal cost.ts stepTraffic and the TrafficMeter. A tampered trace (a dropped send, a wrong count, a
 * send moved to another step) must fail. Then the same through the real trace.json of `train --dp 2` in a subprocess.
 * (dp and pp 1F1B are covered in run.test.ts.)
 */
import { deepStrictEqual, equal, match, notDeepStrictEqual, ok, throws } from 'node:assert/strict';
import { type ChromeTrace, type TraceEvent, WALL_PID } from '../../src/comm/trace.ts';
import { isValidationKey, sentElements, traceSends } from '../../src/comm/trace_bytes.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { runCli } from '../util/cli.ts';
import { TEST, tracedRun, traceMismatches } from './trace_harness.ts';
import { sentByDim } from '../../src/parallel/run/run.ts';
import type { DataPlane } from '../../src/comm/data_plane.ts';

/**
 * Runs `plan` on each data plane (docs/design.md#the-shared-data-plane-of-worker-ranks), requires an exact trace, a
 * send on every rank in every step, and the same sends on both planes; returns the message plane's run.
 */
async function exact(name: string, plan: Partial<ParallelPlan>, over: Partial<TrainConfig> = {}) {
  const shared = await exactOn('shared', name, plan, over);
  const r = await exactOn('message', name, plan, over);
  deepStrictEqual(traceSends(shared.trace), traceSends(r.trace), `${name}: the same sends on both planes`);
  return r;
}

async function exactOn(plane: DataPlane, what: string, plan: Partial<ParallelPlan>, over: Partial<TrainConfig>) {
  const name = `${what} (${plane} plane)`;
  const r = await tracedRun(makePlan(plan), over, plane);
  deepStrictEqual(traceMismatches(r.ranks, r.trace), [], `${name}: trace elements per step = meter = stepTraffic`);
  const rows = traceSends(r.trace);
  for (const s of r.ranks) {
    // Outside the steps only ZeRO-3's validation gathers (group eval) may send.
    const outside = rows.filter((x) => x.rank === s.rank && x.step === null).flatMap((x) => Object.keys(x.sent)).filter(
      (k) => !isValidationKey(k),
    );
    deepStrictEqual(outside, [], `${name}: rank ${s.rank} sent nothing outside the steps but validation gathers`);
    deepStrictEqual(
      rows.filter((x) => x.rank === s.rank && x.step !== null).map((x) => x.step),
      [0, 1],
      `${name}: rank ${s.rank} sent in steps 0 and 1`,
    );
  }
  return r;
}

const copy = (t: ChromeTrace): ChromeTrace => structuredClone(t);
/** Index of the first wall-clock send event of `rank` in `step` with a payload. */
const sendAt = (t: ChromeTrace, rank: number, step: number) =>
  t.traceEvents.findIndex((e) =>
    e.ph === 'X' && e.pid === WALL_PID && e.cat === 'send' && e.tid === rank && e.args?.step === step &&
    (e.args?.bytes as number) > 0
  );

Deno.test({
  name: 'ZeRO 1 over dp 2: trace elements per step = stepTraffic; a dropped, miscounted or moved send fails',
  ...TEST,
  fn: async () => {
    const { ranks, trace } = await exact('zero 1', { dp: 2, zero: 1 });

    const i = sendAt(trace, 1, 1);
    ok(i >= 0, 'rank 1 sends in step 1');
    const ev = trace.traceEvents[i], key = `${ev.args!.group}/${ev.args!.op}`, n = (ev.args!.bytes as number) / 4;
    const dropped = copy(trace);
    dropped.traceEvents.splice(i, 1);
    const lost = traceMismatches(ranks, dropped);
    ok(
      lost.some((l) =>
        l.startsWith('rank 1 step 1 ') &&
        l.includes(`meter ${ranks[1].records[1].sent[key]}, trace ${ranks[1].records[1].sent[key] - n}`)
      ),
      `a dropped span fails: ${lost}`,
    );
    ok(
      lost.some((l) => /^rank 1 step 1 dp\/\w+: predicted \d+, trace \d+$/.test(l)),
      'and disagrees with the prediction',
    );
    ok(lost.every((l) => l.startsWith('rank 1 step 1 ')), `only rank 1 step 1 is affected: ${lost}`);

    const more = copy(trace), a = more.traceEvents[i].args!;
    a.bytes = (a.bytes as number) + 4;
    a.elements = (a.elements as number) + 1;
    ok(
      traceMismatches(ranks, more).some((l) => l.includes(`trace ${ranks[1].records[1].sent[key] + 1}`)),
      'one element too many fails',
    );

    const moved = copy(trace);
    moved.traceEvents[i].args!.step = 0;
    const m = traceMismatches(ranks, moved);
    ok(
      m.some((l) => l.startsWith('rank 1 step 0 ')) && m.some((l) => l.startsWith('rank 1 step 1 ')),
      `a send moved to another step fails: ${m}`,
    );

    const outside = copy(trace);
    delete outside.traceEvents[i].args!.step;
    outside.traceEvents = outside.traceEvents.filter((e) =>
      !(e.cat === 'compute' && e.tid === 1 && /^step /.test(e.name))
    );
    ok(
      traceMismatches(ranks, outside).some((l) => /^rank 1: trace has sends at step null/.test(l)),
      'a send outside every step fails',
    );

    const bad = copy(trace);
    bad.traceEvents[i].args!.elements = n + 1;
    throws(() => traceMismatches(ranks, bad), /elements \d+ disagrees with args\.bytes/);
  },
});

Deno.test({
  name:
    'ZeRO 2 and ZeRO 3 over dp 2: trace elements per step = stepTraffic (stage 3 all-gathers parameters twice); ZeRO-3 reports the validation loss',
  ...TEST,
  fn: async () => {
    const z2 = await exact('zero 2', { dp: 2, zero: 2 });
    const z3 = await exact('zero 3', { dp: 2, zero: 3 });
    const gathered = (r: typeof z2) => r.ranks[0].records[1].byDim['dp/allGather'];
    equal(gathered(z3), 2 * gathered(z2), 'forward and backward gathers');
    // ZeRO-3 validates too: every rank gathers the layers (group eval, between steps) and
    // rank 0 reports what ZeRO-2's whole-model rank 0 reports for the same weights.
    const val = (r: typeof z2) => r.ranks[0].records[1].valLoss!;
    ok(
      Number.isFinite(val(z3)) && Math.abs(val(z3) - val(z2)) <= 1e-4 * val(z2),
      `ZeRO-3 val loss ${val(z3)} vs ZeRO-2 ${val(z2)}`,
    );
    equal(z3.ranks[1].records[1].valLoss, undefined, 'only rank 0 reports it');
  },
});

Deno.test({
  name:
    'tp 2 and tp 2 + sp: trace elements per step = stepTraffic (activation, cross-entropy, norm and sp-gradient collectives)',
  ...TEST,
  fn: async () => {
    const tp = await exact('tp', { tp: 2 });
    ok(tp.ranks.every((s) => sentByDim(s.records[0].sent)['tp/allReduce'] > 0));
    const sp = await exact('tp + sp', { tp: 2, sp: true });
    const d = sentByDim(sp.ranks[0].records[1].sent);
    ok(d['tp/reduceScatter'] > 0 && d['tp/allGather'] > 0, `sp reduce-scatters and all-gathers: ${JSON.stringify(d)}`);
  },
});

Deno.test({
  name:
    'pp 2 GPipe and the dp 2 × pp 2 mesh: trace elements per step = stepTraffic (p2p sends, tied embedding, scalars)',
  ...TEST,
  fn: async () => {
    const pp = await exact('pp gpipe', { pp: 2, microBatches: 2, schedule: 'gpipe' });
    ok(
      pp.ranks.every((s) => s.records.every((r) => sentByDim(r.sent)['pp/send'] === 2 * 2 * 16 * 32)),
      'm·b·T·C activations or gradients per stage per step',
    );
    const mesh = await exact('mesh dp 2 × pp 2', { dp: 2, pp: 2, microBatches: 2 });
    equal(mesh.ranks.length, 4);
    ok(
      mesh.ranks.every((s) =>
        s.kind === 'mesh' && s.records[0].byDim['dp/allReduce'] > 0 && s.records[0].byDim['pp/send'] > 0
      ),
    );
  },
});

Deno.test({
  name:
    'cp 2 ring and Ulysses: trace elements per step = stepTraffic (attention p2p / all-to-all, gradient all-reduce)',
  ...TEST,
  fn: async () => {
    const ring = await exact('cp ring', { cp: 2 });
    ok(ring.ranks.every((s) => s.records[0].byDim['cp/send'] > 0));
    const uly = await exact('cp ulysses', { cp: 2, cpKind: 'ulysses' });
    ok(uly.ranks.every((s) => s.records[0].byDim['cp/allToAll'] > 0));
  },
});

Deno.test({
  name: 'ep 2 on gpt-moe: trace elements per step = stepTraffic (token all-to-all, dense gradient sync)',
  ...TEST,
  fn: async () => {
    const ep = await exact('ep', { dp: 2, ep: 2 }, { arch: 'gpt-moe', nExpert: 4 });
    ok(ep.ranks.every((s) => s.kind === 'mesh' && s.records[0].byDim['ep/allToAll'] > 0));
  },
});

const TINY = [
  '--n-layer',
  '2',
  '--n-head',
  '2',
  '--n-embd',
  '32',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--steps',
  '3',
  '--log-interval',
  '1',
  '--eval-batches',
  '1',
  '--lr',
  '1e-2',
  '--warmup',
  '0',
];

interface AccountingFile {
  ranks: { rank: number; kind: 'mesh'; traffic: { key: string; predicted: number; exact: boolean }[] }[];
}

Deno.test({
  name:
    'train --dp 2: the trace.json the CLI writes records, per rank and step, the predicted elements per collective and the metrics.jsonl counts',
  ...TEST,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'trace-bytes-' });
    try {
      const r = await runCli('train.ts', ['--dp', '2', ...TINY, '--out', dir]);
      equal(r.code, 0, `exit 0\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
      // Deno can always share memory: the run says which plane it used, and its trace records it
      // (docs/design.md#the-shared-data-plane-of-worker-ranks).
      match(r.stdout, /^data plane: shared \(SharedArrayBuffer rings of [\d.]+ MiB per pair of ranks\)$/m);
      const trace = JSON.parse(await Deno.readTextFile(`${dir}/trace.json`)) as ChromeTrace;
      const acc = JSON.parse(await Deno.readTextFile(`${dir}/accounting.json`)) as AccountingFile;
      const metrics = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l))
        .filter((l) => typeof l.loss === 'number');
      deepStrictEqual(metrics.map((l) => l.step), [0, 1, 2]);
      const sends = trace.traceEvents.filter((e) => e.ph === 'X' && e.pid === WALL_PID && e.cat === 'send');
      ok(
        sends.length > 0 &&
          sends.every((e) => Number.isInteger(e.args?.step) && e.args?.elements === (e.args?.bytes as number) / 4),
        'every send names its step and elements',
      );
      equal(trace.otherData?.dataPlane, 'shared');
      const rows = traceSends(trace);
      deepStrictEqual(
        rows.map((x) => [x.rank, x.step]),
        [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]],
        'every send of the run belongs to a step',
      );
      for (const a of acc.ranks) {
        ok(a.traffic.length > 0 && a.traffic.every((t) => t.exact), `rank ${a.rank}: exact prediction rows`);
        const want = Object.fromEntries(a.traffic.filter((t) => t.predicted > 0).map((t) => [t.key, t.predicted]));
        ok(want['dp/allReduce'] > 15_000, JSON.stringify(want));
        for (const row of rows.filter((x) => x.rank === a.rank)) {
          const sent = sentElements(rows, a.rank, row.step);
          deepStrictEqual(sentByDim(sent), want, `rank ${a.rank} step ${row.step}: trace.json = stepTraffic`);
          deepStrictEqual(
            sent,
            metrics[row.step!].sent_by_rank[a.rank],
            `rank ${a.rank} step ${row.step}: trace.json = metrics.jsonl`,
          );
          ok(Object.values(row.sent).every((c) => c.bytes === 4 * c.elements && c.messages > 0));
        }
      }
      const dropOne = structuredClone(trace);
      dropOne.traceEvents.splice(
        dropOne.traceEvents.findIndex((e: TraceEvent) =>
          e.pid === WALL_PID && e.cat === 'send' && e.tid === 0 && e.args?.step === 2
        ),
        1,
      );
      const want0 = Object.fromEntries(
        acc.ranks[0].traffic.filter((t) => t.predicted > 0).map((t) => [t.key, t.predicted]),
      );
      notDeepStrictEqual(
        sentByDim(sentElements(traceSends(dropOne), 0, 2)),
        want0,
        'a dropped span of the file shows',
      );
      deepStrictEqual(sentByDim(sentElements(traceSends(dropOne), 0, 1)), want0, 'and only in its step');
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
