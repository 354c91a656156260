import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { groupColour, layoutMesh, meshLinks } from '../../src/app/mesh_layout.ts';
import { DeviceMesh } from '../../src/comm/mesh.ts';

Deno.test('mesh layout: one cube per rank, distinct positions, centred, tp neighbours adjacent', () => {
  const shape = [2, 2, 1, 2] as const;
  const cubes = layoutMesh(shape, 'tp');
  equal(cubes.length, 8);
  equal(new Set(cubes.map((c) => c.position.join())).size, 8, 'no two ranks overlap');
  for (let axis = 0; axis < 3; axis++) {
    const mean = cubes.reduce((a, c) => a + c.position[axis], 0) / cubes.length;
    ok(Math.abs(mean) < 1e-9, `centred on axis ${axis}: ${mean}`);
  }
  // Ranks 0 and 1 form a TP group: same y and z, adjacent in x.
  deepStrictEqual(cubes[0].position.slice(1), cubes[1].position.slice(1));
  ok(cubes[1].position[0] > cubes[0].position[0]);
  // Pipeline stage 1 sits above stage 0.
  const mesh = new DeviceMesh(shape, 8);
  const s1 = mesh.rankOf({ dp: 0, pp: 1, cp: 0, tp: 0 });
  ok(cubes[s1].position[1] > cubes[0].position[1]);
});

Deno.test('mesh layout: colours follow the groups of the chosen dimension', () => {
  const shape = [2, 1, 1, 4] as const;
  const byTp = layoutMesh(shape, 'tp');
  deepStrictEqual(byTp.map((c) => c.group), [0, 0, 0, 0, 1, 1, 1, 1]);
  const byDp = layoutMesh(shape, 'dp');
  deepStrictEqual(byDp.map((c) => c.group), [0, 1, 2, 3, 0, 1, 2, 3]);
  const a = groupColour(0, 2), b = groupColour(1, 2);
  ok(a.some((v, i) => Math.abs(v - b[i]) > 0.2), `distinct colours ${a} vs ${b}`);
  ok([...a, ...b].every((v) => v >= 0 && v <= 1));
});

Deno.test('mesh links: rings inside tp/dp groups, chains along pp, none for singleton dims', () => {
  const shape = [1, 3, 1, 4] as const;
  const tp = meshLinks(shape, ['tp']);
  equal(tp.length, 3 * 4, 'three TP rings of four: 4 links each');
  const pp = meshLinks(shape, ['pp']);
  equal(pp.length, 4 * 2, 'four pipelines of three stages: 2 links each, no wrap');
  deepStrictEqual(meshLinks([2, 1, 1, 1], ['dp']), [{ a: 0, b: 1, dim: 'dp' }]);
  deepStrictEqual(meshLinks([1, 1, 1, 1], ['dp', 'tp']), []);
});
