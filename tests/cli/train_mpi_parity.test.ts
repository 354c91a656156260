/**
 * MPI parity at the plan level (docs/design.md#training-over-mpi): under mpirun, tp2 and pp2 on 2 processes and
 * the composed dp2 × tp2 × pp2 mesh on 8 train 10 steps within 1e-4 of the single-rank run and
 * give losses identical to the same plan on worker ranks (this project's algorithms over the MPI
 * wire: the same arithmetic in the same order), with the same exact traffic accounting. Recurrent depth under
 * cp 2 × tp 2 on 4 processes too: its traffic, which changes with the r drawn each step, is
 * predicted exactly for the last step.
 */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN } from '../util/cli.ts';
import { mpirun } from '../util/mpirun.ts';

const TINY = [...TINY_RUN, '--n-layer', '2', '--steps', '10', '--eval-batches', '1'];
const opts = { sanitizeResources: false, sanitizeOps: false };

Deno.test({
  name: 'mpirun: tp2, pp2 and dp2×tp2×pp2 (8 processes) train 10 steps as the single-rank run and the worker ranks do',
  ...opts,
  fn: async () => {
    const single = await Deno.makeTempDir();
    const one = await runCli('train.ts', [...TINY, '--out', single]);
    equal(one.code, 0, one.stderr);
    const ref = await lossSeries(`${single}/metrics.jsonl`);
    equal(ref.length, 10);
    for (
      const [n, plan] of [[2, ['--tp', '2']], [2, ['--pp', '2']], [8, ['--dp', '2', '--tp', '2', '--pp', '2']]] as const
    ) {
      const [a, b] = [await Deno.makeTempDir(), await Deno.makeTempDir()];
      const mpi = await mpirun(n, [...TINY, ...plan, '--transport', 'mpi', '--out', a], 300_000);
      equal(mpi.code, 0, mpi.stderr + mpi.stdout);
      match(mpi.stdout, new RegExp(`${n} MPI processes`));
      match(mpi.stdout, /measured elements per collective = predicted on every exact row/);
      const workers = await runCli('train.ts', [...TINY, ...plan, '--out', b]);
      equal(workers.code, 0, workers.stderr);
      const [got, want] = [await lossSeries(`${a}/metrics.jsonl`), await lossSeries(`${b}/metrics.jsonl`)];
      equal(got.length, 10);
      got.forEach((l, i) => {
        ok(Math.abs(l - ref[i]) <= 1e-4 * ref[i], `${plan.join(' ')} step ${i}: MPI ${l} vs single rank ${ref[i]}`);
      });
      deepStrictEqual(got, want, `${plan.join(' ')}: MPI losses are identical to the worker run`);
    }
  },
});

Deno.test({
  name: 'mpirun: streaming DiLoCo (int4, an overlapped outer allReduce) on 2 processes trains as the worker ranks do',
  ...opts,
  fn: async () => {
    const sync = [
      '--dp',
      '2',
      '--sync',
      'streaming-diloco',
      '--inner-steps',
      '4',
      '--fragments',
      '2',
      '--outer-quant',
      'int4',
    ];
    const [a, b] = [await Deno.makeTempDir(), await Deno.makeTempDir()];
    const mpi = await mpirun(2, [...TINY, ...sync, '--transport', 'mpi', '--out', a], 300_000);
    equal(mpi.code, 0, mpi.stderr + mpi.stdout);
    match(mpi.stdout, /streaming-diloco H 4/);
    const workers = await runCli('train.ts', [...TINY, ...sync, '--out', b]);
    equal(workers.code, 0, workers.stderr);
    const [got, want] = [await lossSeries(`${a}/metrics.jsonl`), await lossSeries(`${b}/metrics.jsonl`)];
    equal(got.length, 10);
    deepStrictEqual(got, want, 'MPI losses are identical to the worker run');
    // Every outer message is counted, overlapped or not: the same bytes on both transports.
    const outer = async (dir: string) =>
      (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l))
        .filter((l) => l.sent_by_rank).reduce(
          (s, l) =>
            s + Object.entries(l.sent_by_rank[0] as Record<string, number>).filter(([k]) => k.includes('/outer'))
              .reduce((t, [, n]) => t + n, 0),
          0,
        );
    const bytes = await outer(a);
    ok(bytes > 0);
    equal(bytes, await outer(b));
  },
});

Deno.test({
  name: 'mpirun: recurrent depth on cp2 × tp2 (4 processes) trains as the single-rank run and the worker ranks do',
  ...opts,
  fn: async () => {
    const rd = [...TINY, '--arch', 'recurrent-depth', '--n-layer', '3', '--recur-iters', '3', '--recur-backprop', '2'];
    const [single, a, b] = [await Deno.makeTempDir(), await Deno.makeTempDir(), await Deno.makeTempDir()];
    const one = await runCli('train.ts', [...rd, '--out', single]);
    equal(one.code, 0, one.stderr);
    const ref = await lossSeries(`${single}/metrics.jsonl`), plan = ['--cp', '2', '--tp', '2'];
    const mpi = await mpirun(4, [...rd, ...plan, '--transport', 'mpi', '--out', a], 300_000);
    equal(mpi.code, 0, mpi.stderr + mpi.stdout);
    match(mpi.stdout, /measured elements per collective = predicted on every exact row/);
    // The tp and cp rows are exact (the last step's r), not skipped as approximations.
    const acc = JSON.parse(await Deno.readTextFile(`${a}/accounting.json`));
    for (const key of ['tp/allReduce', 'cp/send']) {
      const row = acc.ranks[0].traffic.find((t: { key: string }) => t.key === key);
      ok(row?.exact && row.measured > 0 && row.measured === row.predicted, `${key}: ${JSON.stringify(row)}`);
    }
    const workers = await runCli('train.ts', [...rd, ...plan, '--out', b]);
    equal(workers.code, 0, workers.stderr);
    const [got, want] = [await lossSeries(`${a}/metrics.jsonl`), await lossSeries(`${b}/metrics.jsonl`)];
    equal(got.length, 10);
    got.forEach((l, i) => ok(Math.abs(l - ref[i]) <= 1e-4 * ref[i], `step ${i}: MPI ${l} vs single rank ${ref[i]}`));
    deepStrictEqual(got, want, 'MPI losses are identical to the worker run');
  },
});
