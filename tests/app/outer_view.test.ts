import { deepStrictEqual, equal } from 'node:assert/strict';
import type { Span } from '../../src/comm/trace.ts';
import { outerSyncLine, outerSyncStats } from '../../src/app/panels/outer_view.ts';

/** A send span of `rank` on `group`, call `seq`, during step `step`. */
const send = (rank: number, group: string, seq: number, step: number): Span => ({
  rank,
  kind: 'send',
  op: 'allReduce',
  group,
  algorithm: 'ring',
  bytes: 64,
  peer: 1 - rank,
  start: 0,
  end: 1,
  simStart: 0,
  simEnd: 0,
  seq,
  step,
});

Deno.test('timeline: outer calls are counted per rank, group and seq; a call spanning steps overlapped them', () => {
  const spans = [
    send(0, 'dp[0,1]/outer', 0, 1),
    send(0, 'dp[0,1]/outer', 0, 1), // the same call, a second ring hop
    send(1, 'dp[0,1]/outer', 0, 1),
    send(0, 'dp[0,1]/outer', 1, 3),
    send(0, 'dp[0,1]/outer', 1, 4), // launched in step 3, still sending in step 4
    send(0, 'dp[0,1]/grads', 5, 2), // not the outer group
  ];
  deepStrictEqual(outerSyncStats(spans), { calls: 3, overlapped: 1, groups: ['dp[0,1]/outer'], bytes: 5 * 64 });
  equal(outerSyncLine(spans), ' · outer synchronisation: 3 calls on dp[0,1]/outer, 1 overlapping later inner steps');
  equal(outerSyncStats(spans.slice(5)), null);
  equal(outerSyncLine([]), '');
});
