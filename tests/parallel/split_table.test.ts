/**
 * docs/parallel.md's table of which split each architecture takes equals what strategy.ts accepts:
 * every cell is checked both ways (a ✓ must be accepted, a — refused with an error naming the
 * dimension and the architecture), and every architecture has a row.
 */
import { deepEqual, equal, ok, throws } from 'node:assert/strict';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { strategyOf } from '../../src/parallel/plan/strategy.ts';
import { ARCH_NAMES } from '../../src/models/archs.ts';

const GUIDE = await Deno.readTextFile(new URL('../../docs/parallel.md', import.meta.url));

/** The plan each column stands for (its dimension at 2 on a mesh that has what it needs). */
const COLUMNS: Record<string, Partial<ParallelPlan>[]> = {
  'dp, ZeRO-1/2/3': [{ dp: 2 }, { dp: 2, zero: 1 }, { dp: 2, zero: 2 }, { dp: 2, zero: 3 }],
  tp: [{ tp: 2 }],
  sp: [{ tp: 2, sp: true }],
  pp: [{ pp: 2 }],
  cp: [{ cp: 2 }],
  ep: [{ dp: 2, ep: 2 }],
};

Deno.test('docs/parallel.md split table = strategy.ts: every ✓ accepted, every — refused by name', () => {
  const lines = GUIDE.split('\n');
  const head = lines.findIndex((l) => /^\| `--arch` +\| dp, ZeRO-1\/2\/3 \|/.test(l));
  ok(head >= 0, 'the table is in docs/parallel.md');
  const cols = lines[head].split('|').slice(2, -1).map((c) => c.trim());
  deepEqual(cols, Object.keys(COLUMNS));
  const after = lines.slice(head + 2), end = after.findIndex((l) => !l.startsWith('|'));
  const rows = end < 0 ? after : after.slice(0, end); // the table's rows: up to the first line that is not one
  const archs = rows.map((r) => /^\| `([a-z-]+)`/.exec(r)![1]);
  deepEqual([...archs].sort(), [...ARCH_NAMES].sort(), 'one row per architecture');
  for (const row of rows) {
    const arch = /^\| `([a-z-]+)`/.exec(row)![1], cells = row.split('|').slice(2, -1).map((c) => c.trim());
    cells.forEach((cell, i) => {
      for (const p of COLUMNS[cols[i]]) {
        const what = `${arch} × ${JSON.stringify(p)}`;
        if (cell === '✓') equal(strategyOf(makePlan(p), arch), 'mesh', what);
        else {
          equal(cell, '—', `${what}: a cell is ✓ or —`);
          const dim = cols[i] === 'sp' ? 'sp' : `${cols[i]} 2`;
          throws(() => strategyOf(makePlan(p), arch), new RegExp(`^Error: ${dim} .*${arch}`), what);
        }
      }
    });
  }
});
