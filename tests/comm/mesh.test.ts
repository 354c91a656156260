/** DeviceMesh: picotron's [dp, pp, cp, tp] layout, its groups and validation. */
import { deepStrictEqual, throws } from 'node:assert/strict';
import { DeviceMesh } from '../../src/comm/mesh.ts';
import { withWorld, WORKER_TEST } from './world.ts';

Deno.test('DeviceMesh [2,2,1,2]: coordinates and groups follow rank = ((dp·pp + pp)·cp + cp)·tp + tp', () => {
  const m = new DeviceMesh([2, 2, 1, 2], 8, 5);
  deepStrictEqual(m.coords(), { dp: 1, pp: 0, cp: 0, tp: 1 });
  deepStrictEqual(m.group('tp'), [4, 5]);
  deepStrictEqual(m.group('pp'), [5, 7]);
  deepStrictEqual(m.group('dp'), [1, 5]);
  deepStrictEqual(m.group('cp'), [5]);
  deepStrictEqual(m.groups('tp'), [[0, 1], [2, 3], [4, 5], [6, 7]]);
  deepStrictEqual(m.groups('pp'), [[0, 2], [1, 3], [4, 6], [5, 7]]);
  deepStrictEqual(m.groups('dp'), [[0, 4], [1, 5], [2, 6], [3, 7]]);
  for (let r = 0; r < 8; r++) deepStrictEqual(m.rankOf(m.coords(r)), r);
  deepStrictEqual(new DeviceMesh({ dp: 2, pp: 1, cp: 3, tp: 1 }, 6).groups('cp'), [[0, 1, 2], [3, 4, 5]]);
});

Deno.test('DeviceMesh validates its shape against the world size', () => {
  throws(() => new DeviceMesh([2, 2, 1, 2], 6), /DeviceMesh: dp×pp×cp×tp = 2×2×1×2 = 8 but the world has 6 ranks/);
  throws(() => new DeviceMesh([2, 0, 1, 2], 0), /must be 4 positive integers/);
  throws(() => new DeviceMesh([2, 2, 2], 8), /must be 4 positive integers/);
  throws(() => new DeviceMesh([1, 1, 1, 2], 2, 2), /rank 2 is outside a world of 2/);
  throws(() => new DeviceMesh([1, 1, 1, 2], 2).rankOf({ dp: 0, pp: 0, cp: 0, tp: 2 }), /tp=2 is outside 0…1/);
});

Deno.test({
  name: "DeviceMesh [2,2,1,2] on 8 workers: each dimension's communicator reduces over its group",
  ...WORKER_TEST,
  fn: () =>
    withWorld(8, async (w) => {
      const res = await w.run<Record<string, { ranks: number[]; sum: number }>>('mesh', { shape: [2, 2, 1, 2] });
      const m = new DeviceMesh([2, 2, 1, 2], 8);
      res.forEach((r, rank) => {
        for (const d of ['dp', 'pp', 'cp', 'tp'] as const) {
          const g = m.group(d, rank);
          deepStrictEqual(r[d], { ranks: g, sum: g.reduce((a, b) => a + b, 0) });
        }
        deepStrictEqual(r.coords, m.coords(rank));
      });
    }),
});
