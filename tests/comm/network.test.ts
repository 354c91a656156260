/**
 * The network model and the simulated clock: parsing and presets; each algorithm's simulated
 * time equals its α-β formula (docs/design.md#the-network-model-the-simulated-clock-and-collective-costs) on a flat
 * network; a two-level topology charges the inter-node link across nodes and slows ring allReduce by the expected
 * amount.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { NET_PRESETS, NetworkModel, parseNetwork, SimClock } from '../../src/comm/network.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import { ALGORITHMS } from '../../src/comm/call_options.ts';
import { predictUs, type SizedCollective } from '../../src/comm/cost.ts';

Deno.test('parseNetwork reads two-level specs, units and presets', () => {
  deepStrictEqual(parseNetwork('intra=300GB/s,1us;inter=25GB/s,5us;node=4'), {
    intra: { alphaUs: 1, betaGBps: 300 },
    inter: { alphaUs: 5, betaGBps: 25 },
    ranksPerNode: 4,
  });
  deepStrictEqual(parseNetwork('link=100Gb/s,500ns'), {
    intra: { alphaUs: 0.5, betaGBps: 12.5 },
    inter: { alphaUs: 0.5, betaGBps: 12.5 },
    ranksPerNode: 1,
  });
  deepStrictEqual(parseNetwork('nvlink-ib'), {
    intra: { alphaUs: 1, betaGBps: 300 },
    inter: { alphaUs: 5, betaGBps: 25 },
    ranksPerNode: 8,
  });
  for (const name of Object.keys(NET_PRESETS)) {
    const m = NetworkModel.parse(name);
    deepStrictEqual(NetworkModel.parse(m.toString()).spec, m.spec, name);
  }
  equal(parseNetwork('intra=1GB/s,1ms;inter=500MB/s,2us;node=2;peak=100').peakGflops, 100);
});

Deno.test('parseNetwork errors name the bad part and the accepted syntax', () => {
  throws(
    () => parseNetwork('intra=300GB/s;inter=25GB/s,5us;node=4'),
    /intra needs both a bandwidth and a latency, got '300GB\/s'/,
  );
  throws(() => parseNetwork('intra=300GB,1us;inter=25GB/s,5us;node=4'), /'300GB' in intra is not a bandwidth/);
  throws(() => parseNetwork('intra=300GB/s,1us;inter=25GB/s,5us'), /missing 'node='/);
  throws(() => parseNetwork('intra=300GB/s,1us;inter=25GB/s,5us;node=0'), /node must be a positive integer/);
  // Number('') is 0 and Number('0x4') is 4: neither a blank nor hex may read as a count.
  for (const node of ['', ' ', '0x4', '2.5', '1e1']) {
    throws(
      () => parseNetwork(`intra=300GB/s,1us;inter=25GB/s,5us;node=${node}`),
      /node must be a positive integer|missing 'node='/,
      node,
    );
  }
  for (const peak of ['', '0x10', 'lots']) {
    throws(() => parseNetwork(`link=1GB/s,1us;peak=${peak}`), /peak must be a positive GFLOP\/s figure/, peak);
  }
  equal(parseNetwork('link=1GB/s,1us;peak=2.5e3GFLOP/s').peakGflops, 2500);
  throws(() => parseNetwork('fast'), /unknown field 'fast'.*nvlink-ib/);
  throws(() => parseNetwork('link=0GB/s,1us'), /bandwidth in link must be positive/);
  throws(() => parseNetwork('link=1GB/s,1us;node=2'), /do not combine/);
});

Deno.test('SimClock: α + bytes/β per message, back-to-back sends share the egress link', () => {
  const net = NetworkModel.parse('intra=100GB/s,2us;inter=10GB/s,10us;node=2');
  equal(net.kind(0, 1), 'intra');
  equal(net.kind(1, 2), 'inter');
  const c = new SimClock(1, net);
  equal(c.send(0, 1e6), 2 + 10); // 1 MB over 100 GB/s = 10 µs
  equal(c.send(2, 1e6), 10 + 100); // the inter link is idle: departs at 0
  equal(c.send(3, 1e6), 100 + 10 + 100); // queued behind the first inter message
  c.receive(50);
  equal(c.now, 50);
  c.receive(20);
  equal(c.now, 50);
});

/** Runs one collective of `bytes` on every rank of a fresh world; returns the max simulated end. */
async function simTime(
  p: number,
  net: string,
  coll: SizedCollective,
  algorithm: string,
  bytes: number,
): Promise<number> {
  const world = localWorld(p, { net, trace: false });
  const n = bytes / 4;
  const run = (c: Communicator) => {
    const opts = { algorithm: algorithm as never };
    if (coll === 'allReduce') return c.allReduce(new Float32Array(n), opts);
    if (coll === 'reduceScatter') return c.reduceScatter(new Float32Array(n), opts);
    if (coll === 'allGather') return c.allGather(new Float32Array(n / p), opts);
    if (coll === 'broadcast') return c.broadcast(new Float32Array(n), 0, opts);
    if (coll === 'reduce') return c.reduce(new Float32Array(n), 0, opts);
    return c.allToAll(new Float32Array(n), opts);
  };
  try {
    await onEveryRank(world, run);
    return Math.max(...world.map((c) => c.transport.clock.now));
  } finally {
    closeLocalWorld(world);
  }
}

const FLAT = 'link=25GB/s,5us';
const flat = NetworkModel.parse(FLAT).spec.intra;

Deno.test('ring allReduce on the simulated clock equals 2(p−1)α + 2(p−1)/p·nβ for p = 2, 4', async () => {
  for (const p of [2, 4]) {
    for (const bytes of [4 * 1024, 1 << 20]) {
      const t = await simTime(p, FLAT, 'allReduce', 'ring', bytes);
      const want = 2 * (p - 1) * 5 + ((2 * (p - 1)) / p) * bytes / 25e3;
      ok(Math.abs(t - want) < 1e-6 * want, `p=${p} n=${bytes}: ${t} µs vs ${want} µs`);
    }
  }
});

/** Relative gap between the simulated time and the α-β formula of every sized collective × algorithm. */
async function gaps(p: number, bytes: number, only?: SizedCollective): Promise<[string, number][]> {
  const out: [string, number][] = [];
  for (const [coll, algos] of Object.entries(ALGORITHMS)) {
    if (coll === 'barrier' || (only && coll !== only)) continue;
    for (const algorithm of algos) {
      const t = await simTime(p, FLAT, coll as SizedCollective, algorithm, bytes);
      const want = predictUs(coll as SizedCollective, algorithm, bytes, p, flat);
      out.push([`${coll}/${algorithm} p=${p} S=${bytes}: simulated ${t} µs, formula ${want} µs`, (t - want) / want]);
    }
  }
  return out;
}

Deno.test('every collective algorithm equals its α-β formula to float rounding when S splits into p equal chunks (p = 2, 4, 8)', async () => {
  for (const p of [2, 4, 8]) {
    for (const bytes of [4 * 1024, 1 << 20]) {
      for (const [what, gap] of await gaps(p, bytes)) ok(Math.abs(gap) < 1e-12, what);
    }
  }
});

Deno.test('allReduce below 4p bytes: unequal ring chunks make the simulation at most 4e-5 slower than the formula', async () => {
  // The formula charges n/p per step, the ring and Rabenseifner's halving send the largest
  // chunk, ⌈n/p⌉ elements; the gap is that one element's wire time against the step latency.
  for (const p of [2, 4, 8]) {
    for (const bytes of [4, 8, 16].filter((b) => b % (4 * p))) {
      for (const [what, gap] of await gaps(p, bytes, 'allReduce')) {
        ok(gap >= -1e-12 && gap < 4e-5, `${what} (gap ${gap})`);
      }
    }
  }
});

Deno.test('two-level topology: ring allReduce crosses nodes on the inter-node link', async () => {
  const p = 4, two = 'intra=300GB/s,1us;inter=25GB/s,5us;node=2';
  // Ring 0→1→2→3→0 with nodes {0,1}, {2,3}: edges alternate intra (α 1 µs) and inter (α 5 µs).
  // Latency-bound (4 KiB): every step waits for its left neighbour, so the critical path is
  // 2(p−1) = 6 consecutive edges, 3 of each kind.
  let c = 4096 / p;
  let f = 1 + c / 300e3;
  const s = 5 + c / 25e3;
  let got = await simTime(p, two, 'allReduce', 'ring', 4096);
  ok(Math.abs(got - (3 * f + 3 * s)) < 1e-9 * got, `4 KiB: ${got} µs vs ${3 * f + 3 * s} µs`);
  // Bandwidth-bound (1 MiB): an inter-node chunk's wire time c/β exceeds α_inter + the intra hop,
  // so each inter link sends back to back: 6 chunks on the wire plus one latency.
  c = (1 << 20) / p;
  const wire = c / 25e3;
  f = 1 + c / 300e3;
  ok(wire > 5 + f);
  got = await simTime(p, two, 'allReduce', 'ring', 1 << 20);
  ok(Math.abs(got - (5 + 6 * wire)) < 1e-9 * got, `1 MiB: ${got} µs vs ${5 + 6 * wire} µs`);
  const fast = await simTime(p, 'link=300GB/s,1us', 'allReduce', 'ring', 1 << 20);
  const slow = await simTime(p, 'link=25GB/s,5us', 'allReduce', 'ring', 1 << 20);
  ok(fast < got && got < slow, `${fast} < ${got} < ${slow}`);
  // One node of 4: only intra links, exactly the flat fast network.
  const one = await simTime(p, 'intra=300GB/s,1us;inter=25GB/s,5us;node=4', 'allReduce', 'ring', 1 << 20);
  equal(one, fast);
});

Deno.test('compute spans advance the simulated clock by measured time or FLOPs at the peak', async () => {
  const [c] = localWorld(1, { net: 'link=10GB/s,1us;peak=1000' });
  await c.tracer.span('matmul', () => 1, { flops: 2e9 });
  equal(c.transport.clock.now, 2000); // 2 GFLOP at 1000 GFLOP/s = 2 ms
  await c.tracer.span('sleep', () => new Promise((r) => setTimeout(r, 20)));
  ok(c.transport.clock.now >= 2000 + 15e3, `${c.transport.clock.now}`);
  const s = c.tracer.spans;
  deepStrictEqual(s.map((x) => [x.kind, x.op]), [['compute', 'matmul'], ['compute', 'sleep']]);
  equal(s[0].simEnd - s[0].simStart, 2000);
  closeLocalWorld([c]);
});
