/**
 * The MPI commands of docs/mpi-and-collectives.md as written (section "Over MPI"; the README's tour
 * quotes one): each `mpirun` line of its code blocks runs here with only size flags appended (and
 * tune.json placed in a temp folder): the comm bench on 4 processes, writing the tuning table, then the three dp2 × tp2 training runs on 4.
 * This project's algorithms over MPI give losses identical to the worker run of the same plan;
 * MPI's own collectives and `auto` within 1e-4 (another summation order); every rank in a
 * process of its own (trace.json's `processes`).
 */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN, withTestBackend } from '../util/cli.ts';
import { checkProcesses, mpirunRaw } from '../util/mpirun.ts';
import { parseTuning } from '../../src/comm/tuning.ts';

const root = new URL('../../', import.meta.url).pathname;
const TINY = [...TINY_RUN, '--n-layer', '2', '--steps', '3', '--eval-batches', '1'];
const BENCH_TINY = ['--max-bytes', '1KiB', '--step', '32', '--ops', 'allReduce,allGather'];
const opts = { sanitizeResources: false, sanitizeOps: false };

/** The `mpirun …` lines of the guide's "Over MPI" code blocks, comments dropped, split into words. */
async function guideCommands(): Promise<string[][]> {
  const guide = await Deno.readTextFile(`${root}docs/mpi-and-collectives.md`);
  const start = guide.indexOf('### Over MPI');
  if (start < 0) throw new Error('docs/mpi-and-collectives.md has no "### Over MPI" section');
  const end = guide.indexOf('\n## ', start);
  const section = guide.slice(start, end < 0 ? guide.length : end);
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.flatMap((b) => b.split('\n')).filter((l) => l.startsWith('mpirun '))
    .map((l) => l.replace(/#.*$/, '').trim().split(/\s+/));
}

const commands = await guideCommands();
const dir = await Deno.makeTempDir();
const tune = `${dir}/tune.json`;
/** A guide command's mpirun arguments with the tuning table in the temp folder and `extra` appended. */
const asWritten = (
  cmd: string[],
  extra: string[],
) => [...cmd.slice(1).map((w) => w === 'tune.json' ? tune : w), ...extra];

Deno.test('the MPI guide gives five MPI commands, each started by mpirun -pmi-port through npm', () => {
  equal(commands.length, 5, commands.map((c) => c.join(' ')).join('\n'));
  for (const c of commands) deepStrictEqual(c.slice(0, 3), ['mpirun', '-pmi-port', '-n'], c.join(' '));
  deepStrictEqual(commands.map((c) => c.slice(4, 7).join(' ')), [
    'npm run bench',
    'npm run bench',
    'npm run train',
    'npm run train',
    'npm run train',
  ]);
});

Deno.test({
  name: 'MPI guide: mpirun -pmi-port -n 4 npm run bench -- comm --transport mpi [--tune tune.json] run as written',
  ...opts,
  fn: async () => {
    const bench = commands.filter((c) => c[6] === 'bench');
    equal(bench.length, 2);
    for (const cmd of bench) {
      const out = await mpirunRaw(asWritten(cmd, BENCH_TINY), 180_000);
      equal(out.code, 0, `${cmd.join(' ')}:\n${out.stderr}${out.stdout}`);
      match(out.stdout, /MPI group size 4/);
    }
    // S = 4, 128 B for each collective and group size 2 and 4.
    ok(parseTuning(await Deno.readTextFile(tune), tune).entries.length >= 4);
  },
});

Deno.test({
  name: 'MPI guide: the three mpirun -pmi-port -n 4 npm run train commands run as written and train as the workers do',
  ...opts,
  fn: async () => {
    const train = commands.filter((c) => c[6] === 'train');
    equal(train.length, 3);
    const plan = ['--dp', '2', '--tp', '2'];
    const ref = await Deno.makeTempDir();
    const workers = await runCli('train.ts', [...TINY, ...plan, '--out', ref]);
    equal(workers.code, 0, workers.stderr);
    const want = await lossSeries(`${ref}/metrics.jsonl`);
    equal(want.length, 3);
    for (const cmd of train) {
      deepStrictEqual(cmd.slice(-4), plan, cmd.join(' '));
      const out = `${dir}/${train.indexOf(cmd)}`;
      const res = await mpirunRaw(asWritten(cmd, withTestBackend('train.ts', [...TINY, '--out', out])), 300_000);
      equal(res.code, 0, `${cmd.join(' ')}:\n${res.stderr}${res.stdout}`);
      const backend = cmd.includes('--comm-backend') ? cmd[cmd.indexOf('--comm-backend') + 1] : 'ours';
      match(res.stdout, new RegExp(`4 MPI processes · collectives: ${backend}`));
      const got = await lossSeries(`${out}/metrics.jsonl`);
      if (backend === 'ours') {
        deepStrictEqual(got, want, `${cmd.join(' ')}: losses identical to the worker run`);
        match(res.stdout, /measured elements per collective = predicted on every exact row/);
      } else {
        if (backend === 'mpi') {
          // Every group's collectives ran on MPI's own, so on a communicator split at setup.
          const trace = JSON.parse(await Deno.readTextFile(`${out}/trace.json`));
          const spans: { cat?: string; args: { group: string; algorithm: string } }[] = trace.traceEvents;
          const ours = spans.filter((e) => e.cat === 'collective' && e.args.algorithm !== 'mpi');
          equal(ours.length, 0, `collectives on ours: ${[...new Set(ours.map((e) => e.args.group))]}`);
        }
        equal(got.length, 3);
        got.forEach((l, i) => ok(Math.abs(l - want[i]) <= 1e-4 * want[i], `${backend} step ${i}: ${l} vs ${want[i]}`));
      }
      await checkProcesses(`${out}/trace.json`, 4);
    }
  },
});
