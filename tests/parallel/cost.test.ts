/**
 * src/comm/cost.ts's exact per-rank traffic against src/comm/algorithms.ts and halving_doubling.ts run in-process;
 * src/parallel/cost/cost.ts's per-plan traffic.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import * as A from '../../src/comm/algorithms.ts';
import * as H from '../../src/comm/halving_doubling.ts';
import type { Algorithm } from '../../src/comm/call_options.ts';
import { type Collective, collectiveTraffic } from '../../src/comm/cost.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost/cost.ts';
import { makePlan, type ParallelPlan, rankParams, type StrategyKind } from '../../src/parallel/plan/plan.ts';

const TINY = { nLayer: 2, nHead: 2, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };

/** Runs one collective of algorithms.ts / halving_doubling.ts on p in-process ranks; returns elements and messages each rank sent. */
async function measure(coll: Collective, algo: Algorithm, n: number, p: number, root = 0) {
  const queues = new Map<string, { data: A.NumArray[]; wait: ((x: A.NumArray) => void)[] }>();
  const q = (a: number, b: number) => {
    const k = `${a}>${b}`;
    if (!queues.has(k)) queues.set(k, { data: [], wait: [] });
    return queues.get(k)!;
  };
  const sent = Array.from({ length: p }, () => ({ elements: 0, messages: 0 }));
  const link = (r: number): A.Link => ({
    p,
    r,
    send(peer, data) {
      sent[r].elements += data.length;
      sent[r].messages++;
      const qq = q(r, peer), w = qq.wait.shift();
      if (w) w(data.slice());
      else qq.data.push(data.slice());
    },
    recv(peer) {
      const qq = q(peer, r);
      return qq.data.length ? Promise.resolve(qq.data.shift()!) : new Promise((res) => qq.wait.push(res));
    },
    recvAll(peers) {
      return Promise.all(peers.map((x) => this.recv(x)));
    },
    async recvInto(peer, use) {
      use(await this.recv(peer));
    },
  });
  await Promise.all([...Array(p).keys()].map(async (r) => {
    const l = link(r), offs = A.chunkOffsets(n, p), work = new Float32Array(n).fill(r + 1);
    if (coll === 'allReduce') {
      if (algo === 'ring') {
        await A.ringReduceScatter(l, work, offs, 'sum');
        await A.ringAllGather(l, work, offs);
      } else if (algo === 'recursive-doubling') await H.doublingAllReduce(l, work, 'sum');
      else if (algo === 'rabenseifner') await H.rabenseifnerAllReduce(l, work, 'sum');
      else if (algo === 'binomial') {
        await A.binomialReduce(l, work, 0, 'sum');
        await A.binomialBroadcast(l, work, 0);
      } else await A.directAllReduce(l, work, 'sum');
    } else if (coll === 'reduceScatter') {
      await (algo === 'ring'
        ? A.ringReduceScatter
        : algo === 'rabenseifner'
        ? H.halvingReduceScatter
        : A.directReduceScatter)(l, work, offs, 'sum');
    } else if (coll === 'allGather') {
      await (algo === 'ring'
        ? A.ringAllGather
        : algo === 'recursive-doubling'
        ? H.doublingAllGather
        : A.directAllGather)(l, work, offs);
    } else if (coll === 'broadcast') {
      await (algo === 'binomial' ? A.binomialBroadcast : A.directBroadcast)(l, work, root);
    } else if (coll === 'reduce') await (algo === 'binomial' ? A.binomialReduce : A.directReduce)(l, work, root, 'sum');
    else await A.pairwiseAllToAll(l, work.slice(), work, offs);
  }));
  return sent;
}

const CASES: [Collective, Algorithm[]][] = [
  ['allReduce', ['ring', 'recursive-doubling', 'rabenseifner', 'binomial', 'direct']],
  ['reduceScatter', ['ring', 'rabenseifner', 'direct']],
  ['allGather', ['ring', 'recursive-doubling', 'direct']],
  ['broadcast', ['binomial', 'direct']],
  ['reduce', ['binomial', 'direct']],
  ['allToAll', ['direct']],
];

Deno.test('collectiveTraffic equals what algorithms.ts sends, per rank, for ragged n and any p', async () => {
  let checked = 0;
  for (const [coll, algos] of CASES) {
    for (const algo of algos) {
      for (const p of [1, 2, 3, 4, 5, 6, 7, 8]) {
        for (const n of [0, 1, 7, 13, 64, 65, 127]) {
          if (coll === 'allToAll' && n % p) continue; // the Communicator refuses ragged allToAll
          const root = coll === 'broadcast' || coll === 'reduce' ? p - 1 : 0;
          const got = await measure(coll, algo, n, p, root);
          for (let r = 0; r < p; r++) {
            deepStrictEqual(
              collectiveTraffic(coll, algo, n, p, r, root),
              got[r],
              `${coll}/${algo} n=${n} p=${p} rank ${r}`,
            );
            checked++;
          }
        }
      }
    }
  }
  ok(checked > 2000);
});

Deno.test('ring formulas: 2(p−1)/p·n allReduce and (p−1)/p·n gathers when p divides n; ragged n matches chunkOffsets', () => {
  for (const p of [2, 3, 4, 8]) {
    const n = 24 * p;
    for (let r = 0; r < p; r++) {
      equal(collectiveTraffic('allReduce', 'ring', n, p, r).elements, (2 * (p - 1) / p) * n);
      equal(collectiveTraffic('reduceScatter', 'ring', n, p, r).elements, ((p - 1) / p) * n);
      equal(collectiveTraffic('allGather', 'ring', n, p, r).elements, ((p - 1) / p) * n);
    }
  }
  // n = 10 over 4 ranks: chunks 3,3,2,2; rank 1 sends 2·10 − 3 − 2.
  equal(collectiveTraffic('allReduce', 'ring', 10, 4, 1).elements, 15);
  equal(collectiveTraffic('allReduce', 'ring', 10, 4, 3).elements, 15);
  equal(collectiveTraffic('allReduce', 'ring', 10, 4, 0).elements, 14);
  throws(() => collectiveTraffic('allToAll', 'ring', 8, 2, 0), /allToAll has no algorithm 'ring'/);
  throws(() => collectiveTraffic('allReduce', 'ring', 8, 2, 2), /0 ≤ r < p/);
});

Deno.test('stepTraffic: DP allReduce, TP 4 allReduces per layer per micro-batch, PP boundaries, Ulysses, EP', () => {
  const dp = stepTraffic(makePlan({ dp: 2 }), TINY, 1);
  const psi = rankParams(makePlan({ dp: 2 }), TINY, 1).dense;
  equal(
    trafficByKind(dp).get('dp/allReduce'),
    psi + 1,
    'Ψ grads (2(d−1)/d·Ψ with d 2) + a 1-element loss average on rank 1',
  );
  const b = 8, s = 64, C = 64;
  const tp = stepTraffic(makePlan({ tp: 2, microBatches: 2 }), TINY, 0);
  const layer = tp.find((r) => r.what.startsWith('layer outputs'))!;
  equal(layer.calls, 4 * 2 * 2);
  equal(layer.elements, layer.calls * b * s * C, 'ring allReduce over 2 ranks sends n per call');
  const pp = stepTraffic(makePlan({ pp: 2, microBatches: 4 }), TINY, 0);
  equal(pp.find((r) => r.what === 'activations (fwd)')!.elements, 4 * 4 * s * C);
  equal(pp.find((r) => r.what === 'activation gradients (bwd)'), undefined, 'stage 0 sends no gradient back');
  const last = stepTraffic(makePlan({ pp: 2, microBatches: 4 }), TINY, 1);
  equal(last.find((r) => r.what === 'activation gradients (bwd)')!.elements, 4 * 4 * s * C);
  const tied = (r: number) =>
    stepTraffic(makePlan({ pp: 2, tp: 2 }), TINY, r).find((x) => x.what === 'tied embedding gradients')!;
  deepStrictEqual(
    [tied(0).n, tied(0).group],
    [33 * C, [0, 2]],
    'the first and last stage sum their (66/2)×C embedding slices',
  );
  equal(tied(2).elements + tied(0).elements, 33 * C * 2 * (2 - 1), 'ring allReduce over 2 ranks: each sends n/2 twice');
  const n = 16 * 32 * C,
    uly = stepTraffic(makePlan({ cp: 2, cpKind: 'ulysses' }), TINY, 0).filter((r) => r.dim === 'cp');
  deepStrictEqual(
    uly.map((r) => [r.n, r.calls, r.exact]),
    [[3 * n, 4, true], [n, 4, true]],
    'packed q,k,v and the output, forward + backward, per layer',
  );
  equal(uly.reduce((a, r) => a + r.elements, 0), 2 * 2 * (3 * n + n) / 2, 'each allToAll sends (p−1)/p of its buffer');
  const ep = stepTraffic(makePlan({ dp: 2, ep: 2 }), { ...TINY, nExpert: 4 }, 0, { topK: 2, capacityFactor: 1 });
  const moe = ep.find((r) => r.dim === 'ep')!;
  equal(moe.n, 4 * Math.ceil((8 * 64 * 2) / 4) * C);
  equal(moe.elements, 4 * 2 * moe.n / 2);
  equal(
    ep.find((r) => r.what === 'expert gradients'),
    undefined,
    'experts are not replicated across an EP group of dp',
  );
  const z3 = stepTraffic(makePlan({ dp: 2, zero: 3, microBatches: 2 }), TINY, 0);
  const padded = Math.ceil(psi / 2) * 2;
  equal(
    trafficByKind(z3).get('dp/allGather'),
    4 * padded / 2,
    'ZeRO-3 gathers in forward and backward of each micro-batch',
  );
  equal(trafficByKind(z3).get('dp/reduceScatter'), 2 * padded / 2);
  const sp = stepTraffic(makePlan({ tp: 2, sp: true }), TINY, 0);
  equal(
    trafficByKind(sp).get('tp/allGather'),
    trafficByKind(sp).get('tp/reduceScatter'),
    'SP: as many gathers as scatters',
  );
});

Deno.test('stepTraffic: SP sums wpe with the LayerNorm gradients, ring attention backward returns dK,dV, every row exact', () => {
  const C = 64,
    T = 64,
    sp = (r: number) =>
      stepTraffic(makePlan({ tp: 2, pp: 2, sp: true }), TINY, r).find((x) => x.what.startsWith('LayerNorm'))!;
  equal(sp(0).n, (4 * C + 2 * C) + T * C, "stage 0: its layer's LayerNorms + row-parallel biases and wpe (T, C)");
  equal(sp(2).n, (4 * C + 2 * C) + 2 * C, 'last stage (rank 2 of tp 2 × pp 2): its layer and ln_f, no wpe');
  // b = 16/2 sequences per micro-batch, s = T/cp = 32, 2 layers, 2 micro-batches.
  const kv = 2 * 8 * 32 * C,
    ring = stepTraffic(makePlan({ cp: 2, cpKind: 'ring', microBatches: 2 }), TINY, 1).filter((r) => r.dim === 'cp');
  deepStrictEqual(
    ring.map((r) => [r.n, r.calls, r.elements]),
    [[kv, 4, 4 * kv], [kv, 4, 4 * kv], [kv, 8, 8 * kv]],
    'K,V cp−1 hops in each pass, dK,dV cp hops, per layer and micro-batch',
  );
  for (
    const plan of [
      makePlan({ tp: 2, sp: true }),
      makePlan({ cp: 2 }),
      makePlan({ dp: 2, zero: 1 }),
      makePlan({ pp: 2, tp: 2 }),
    ]
  ) {
    for (const r of [0, 1]) {
      deepStrictEqual(stepTraffic(plan, TINY, r).filter((x) => !x.exact), [], 'no approximate rows');
    }
  }
  // ZeRO-2/3 reduce per 'layer' unit: exact only once the trainer's buckets are given.
  for (const zero of [2, 3] as const) {
    ok(
      stepTraffic(makePlan({ dp: 2, zero }), TINY, 0).some((x) => !x.exact),
      `zero ${zero} without buckets is approximate`,
    );
    deepStrictEqual(
      stepTraffic(makePlan({ dp: 2, zero }), TINY, 0, { buckets: [1024, 512] }).filter((x) => !x.exact),
      [],
      `zero ${zero} with buckets is exact`,
    );
  }
});

Deno.test('stepTraffic: the trainer option adds the scalar allReduces each trainer issues', () => {
  const scalar = (plan: ParallelPlan, trainer: StrategyKind | undefined, r: number) =>
    stepTraffic(plan, TINY, r, { trainer }).filter((x) => x.n <= 2).map((
      x,
    ) => [x.dim, x.what, x.group, x.n, x.elements]);
  const ring = (n: number, p: number, r: number) => collectiveTraffic('allReduce', 'ring', n, p, r).elements;
  deepStrictEqual(scalar(makePlan({ dp: 2 }), 'mesh', 1), [[
    'dp',
    'gradient norm + loss over the world',
    [0, 1],
    2,
    ring(2, 2, 1),
  ]]);
  deepStrictEqual(scalar(makePlan({ tp: 2 }), 'mesh', 0), [[
    'dp',
    'gradient norm + loss over the world',
    [0, 1],
    2,
    ring(2, 2, 0),
  ]]);
  // Without a trainer (a plan none runs): the dp loss average and ZeRO's norm.
  deepStrictEqual(scalar(makePlan({ dp: 2, zero: 1 }), undefined, 0).map((x) => x[1]), [
    'loss average',
    'gradient norm (ZeRO)',
  ]);
  deepStrictEqual(scalar(makePlan({ dp: 2, zero: 1 }), 'mesh', 0).map((x) => x[1]), [
    'gradient norm + loss over the world',
  ]);
  deepStrictEqual(scalar(makePlan({ dp: 4, ep: 2 }), 'mesh', 3).map((x) => x.slice(1, 3)), [[
    'gradient norm + loss over the world',
    [0, 1, 2, 3],
  ]]);
  deepStrictEqual(scalar(makePlan({ dp: 2, pp: 2, tp: 2 }), 'mesh', 5), [[
    'dp',
    'gradient norm + loss over the world',
    [0, 1, 2, 3, 4, 5, 6, 7],
    2,
    ring(2, 8, 5),
  ]]);
  // The mesh's 2-element world sum replaces the dp loss average (absent here: dp 1).
  deepStrictEqual(
    scalar(makePlan({ pp: 2 }), 'mesh', 0).length,
    stepTraffic(makePlan({ pp: 2 }), TINY, 0).filter((x) => x.n <= 2).length + 1,
  );
});
