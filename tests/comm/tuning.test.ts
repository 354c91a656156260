/**
 * The backend tuning table (src/comm/tuning.ts, docs/design.md#two-backends-per-call-mcr-dl): the fastest candidate
 * wins per (collective, group size, S); a call is looked up at the nearest group size and the smallest measured S that
 * holds it; a communicator on backend `auto` really follows the table (a table that says `mpi` sends a call over
 * MessagePorts into the MPI refusal); a malformed file is refused naming it.
 */
import { deepStrictEqual, equal, rejects, throws } from 'node:assert/strict';
import { buildTuning, type Measured, parseTuning, pickBackend } from '../../src/comm/tuning.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';

const rows: Measured[] = [
  { coll: 'allReduce', p: 2, bytes: 64, backend: 'ours', algorithm: 'ring', ms: 0.5 },
  { coll: 'allReduce', p: 2, bytes: 64, backend: 'ours', algorithm: 'direct', ms: 0.3 },
  { coll: 'allReduce', p: 2, bytes: 64, backend: 'mpi', ms: 0.4 },
  { coll: 'allReduce', p: 2, bytes: 4096, backend: 'ours', algorithm: 'ring', ms: 2 },
  { coll: 'allReduce', p: 2, bytes: 4096, backend: 'mpi', ms: 1 },
  { coll: 'allReduce', p: 8, bytes: 64, backend: 'mpi', ms: 9 },
  { coll: 'allReduce', p: 8, bytes: 64, backend: 'ours', algorithm: 'ring', ms: 1 },
];

Deno.test('buildTuning keeps the fastest candidate per (collective, p, S) with every candidate’s time', () => {
  const t = buildTuning(rows, 'today');
  equal(t.entries.length, 3);
  deepStrictEqual(t.entries[0], {
    coll: 'allReduce',
    p: 2,
    bytes: 64,
    backend: 'ours',
    algorithm: 'direct',
    ms: { 'ours/ring': 0.5, 'ours/direct': 0.3, mpi: 0.4 },
  });
  equal(t.entries[1].backend, 'mpi');
  deepStrictEqual(parseTuning(JSON.stringify(t), 'x.json'), t, 'a written table reads back');
});

Deno.test('pickBackend: nearest group size, then the smallest measured S that holds the call', () => {
  const t = buildTuning(rows);
  deepStrictEqual(pickBackend(t, 'allReduce', 16, 2), { backend: 'ours', algorithm: 'direct' });
  deepStrictEqual(pickBackend(t, 'allReduce', 100, 2), { backend: 'mpi' });
  deepStrictEqual(pickBackend(t, 'allReduce', 1 << 20, 3), { backend: 'mpi' }, 'past the end: the largest S');
  deepStrictEqual(pickBackend(t, 'allReduce', 8, 6), { backend: 'ours', algorithm: 'ring' }, 'p 6 is nearest 8');
  equal(pickBackend(t, 'allGather', 8, 2), null);
});

Deno.test('backend auto follows the tuning table, and refuses without one', async () => {
  const world = localWorld(2);
  try {
    for (const c of world) c.backend = 'auto';
    await rejects(onEveryRank(world, (c) => c.allReduce(new Float32Array(4))), /backend 'auto' needs a tuning table/);
    const table = buildTuning(rows);
    for (const c of world) c.tuning = table;
    // 16 B: the table picks ours (direct) — runs over MessagePorts.
    const got = await onEveryRank(world, (c) => c.allReduce(Float32Array.of(c.rank + 1, 1, 1, 1)));
    deepStrictEqual(got.map((x) => x[0]), [3, 3]);
    // 400 B: the table picks MPI's own collective, which MessagePorts do not have.
    await rejects(
      onEveryRank(world, (c) => c.allReduce(new Float32Array(100))),
      /backend 'mpi' .* needs the MPI transport/,
    );
    await rejects(
      onEveryRank(world, (c) => c.allGather(new Float32Array(1))),
      /the tuning table has no entry for allGather/,
    );
  } finally {
    closeLocalWorld(world);
  }
});

Deno.test('a malformed tuning table is refused naming the file and the problem', () => {
  throws(() => parseTuning('{', 't.json'), /tuning table t.json: not JSON/);
  throws(() => parseTuning('{"format":"x","date":"","entries":[]}', 't.json'), /tuning table t.json: .*format/);
});
