/**
 * Parallel training over MPI (docs/design.md#training-over-mpi): `mpirun -pmi-port -n N npm run train -- --transport
 * mpi` (docs/mpi-and-collectives.md's command, tests/util/mpirun.ts) runs one rank per process, each its own WebGPU
 * device, every process running the host loop — each in a process of its own, as the trace's `processes` shows. Against
 * the same plan on worker ranks: this project's algorithms over the MPI wire give identical losses (the same arithmetic
 * in the same order) and the same exact traffic accounting; MPI's own collectives (--comm-backend mpi) give losses
 * within 1e-4 relative (another summation order). The refusals: no mpirun, a process count that is not the plan's world
 * size, an MPI backend without the MPI transport. Under MPI's own collectives every group (lanes included) runs on a
 * communicator split at setup. Compressed dp gradients (--compress) train over MPI as over workers, on both backends.
 */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN } from '../util/cli.ts';
import { checkProcesses, mpirun, spawnMpirun } from '../util/mpirun.ts';
import { buildTuning } from '../../src/comm/tuning.ts';

const TINY = [...TINY_RUN, '--n-layer', '2', '--steps', '4', '--eval-batches', '1'];
const opts = { sanitizeResources: false, sanitizeOps: false };

/** A tuning table for 2 ranks: allReduce above 64 bytes on MPI's own, everything else on ours (tuning.ts). */
async function mixedTable(): Promise<string> {
  const colls = ['allReduce', 'reduceScatter', 'allGather', 'broadcast', 'reduce', 'allToAll'] as const;
  const rows = colls.flatMap((coll) => [
    { coll, p: 2, bytes: 64, backend: 'ours' as const, algorithm: 'ring', ms: 1 },
    {
      coll,
      p: 2,
      bytes: 1 << 30,
      backend: coll === 'allReduce' ? 'mpi' as const : 'ours' as const,
      algorithm: 'ring',
      ms: 1,
    },
  ]);
  const file = await Deno.makeTempFile({ suffix: '.json' });
  await Deno.writeTextFile(file, JSON.stringify(buildTuning(rows)));
  return file;
}

for (
  const [n, plan, backend, tol] of [
    [2, ['--dp', '2'], 'ours', 0],
    // dp2 × tp2 on 4 processes, both backends: the MPI guide's commands (mpi_readme.test.ts).
    [2, ['--dp', '2'], 'auto', 1e-4],
    // Every lane on MPI's own collectives (tp act/ce with sp, the embedding group, validation's): all split at setup.
    [4, ['--tp', '2', '--pp', '2', '--sp'], 'mpi', 1e-4],
    // Compressed collectives move packed words through the same calls: ours traced exactly, MPI's bit for bit.
    [2, ['--dp', '2', '--compress', 'dp=int8'], 'ours', 0],
    [2, ['--dp', '2', '--compress', 'dp=topk:0.1'], 'mpi', 1e-4],
  ] as const
) {
  Deno.test({
    name: `mpirun -n ${n} ${plan.join(' ')} --comm-backend ${backend} trains as the worker ranks do`,
    ...opts,
    fn: async () => {
      const [a, b] = [await Deno.makeTempDir(), await Deno.makeTempDir()];
      const tuning = backend === 'auto' ? ['--comm-tuning', await mixedTable()] : [];
      const launch = ['--transport', 'mpi', '--comm-backend', backend, ...tuning];
      const mpi = await mpirun(n, [...TINY, ...plan, ...launch, '--out', a]);
      equal(mpi.code, 0, mpi.stderr + mpi.stdout);
      const workers = await runCli('train.ts', [...TINY, ...plan, '--out', b]);
      equal(workers.code, 0, workers.stderr);
      equal(mpi.stdout.match(/^done: /gm)?.length, 1, 'rank 0 alone prints');
      match(mpi.stdout, new RegExp(`${n} MPI processes · collectives: ${backend}`));
      const [got, want] = [await lossSeries(`${a}/metrics.jsonl`), await lossSeries(`${b}/metrics.jsonl`)];
      equal(got.length, 4);
      // tol 0: identical (this project's algorithms); else relative (MPI's own sum in another order).
      if (tol === 0) deepStrictEqual(got, want, 'MPI losses are identical to the worker run');
      else {got.forEach((l, i) =>
          ok(Math.abs(l - want[i]) <= tol * want[i], `step ${i}: MPI ${l} vs workers ${want[i]}`)
        );}
      await checkProcesses(`${a}/trace.json`, n);
      if (backend === 'ours') match(mpi.stdout, /measured elements per collective = predicted on every exact row/);
      else if (backend === 'auto') {
        // The table sends the gradient buckets to MPI_Allreduce and the 2-element scalars to our ring.
        const trace = JSON.parse(await Deno.readTextFile(`${a}/trace.json`));
        const algos = new Set(
          trace.traceEvents.filter((e: { cat?: string }) => e.cat === 'collective').map((
            e: { args: { algorithm: string } },
          ) => e.args.algorithm),
        );
        ok(algos.has('mpi') && algos.has('ring'), `both backends ran: ${[...algos]}`);
      } else {
        match(mpi.stdout, /MPI's own collectives .* leave no send spans/);
        // Every group's collectives ran on MPI's own, so on a communicator split at setup.
        const trace = JSON.parse(await Deno.readTextFile(`${a}/trace.json`));
        const spans: { args: { group: string; algorithm: string } }[] = trace.traceEvents.filter((
          e: { cat?: string },
        ) => e.cat === 'collective');
        const ours = spans.filter((e) => e.args.algorithm !== 'mpi').map((e) => e.args.group);
        equal(ours.length, 0, `collectives on ours: ${[...new Set(ours)]}`);
        ok(new Set(spans.map((e) => e.args.group)).size >= 2, 'several groups ran collectives');
      }
      const cfg = JSON.parse(await Deno.readTextFile(`${a}/config.json`));
      equal(cfg.transport, 'mpi');
      const manifest = JSON.parse(await Deno.readTextFile(`${a}/ckpt-parallel.json`));
      equal(manifest.step, 4, 'the checkpoint set of every rank is written by rank 0');
    },
  });
}

Deno.test({
  name: '--transport mpi refuses a launch without mpirun, a wrong process count, and MPI backends over workers',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const alone = await runCli('train.ts', [...TINY, '--dp', '2', '--transport', 'mpi', '--out', dir]);
    ok(alone.code !== 0);
    match(
      alone.stderr,
      /the MPI transport runs one rank per process under an MPI launcher; start it as: mpirun -pmi-port -n 2 npm run train -- /,
    );
    const three = await mpirun(3, [...TINY, '--dp', '2', '--transport', 'mpi', '--out', dir]);
    ok(three.code !== 0);
    match(three.stderr, /mpirun started 3 processes; the plan's world size dp·pp·cp·tp is 2/);
    const workers = await runCli('train.ts', [...TINY, '--dp', '2', '--comm-backend', 'mpi', '--out', dir]);
    ok(workers.code !== 0);
    match(workers.stderr, /--comm-backend mpi runs MPI's own collectives and needs --transport mpi/);
    const auto = await runCli('train.ts', [
      ...TINY,
      '--dp',
      '2',
      '--transport',
      'mpi',
      '--comm-backend',
      'auto',
      '--out',
      dir,
    ]);
    match(auto.stderr, /--comm-backend auto needs --comm-tuning FILE/);
  },
});

/** Pids of the `deno` processes whose command line names `marker` (the MPI ranks of one job). */
async function ranksOf(marker: string): Promise<number[]> {
  const out = await new Deno.Command('ps', { args: ['-eo', 'pid=,comm=,args='], stdout: 'piped' }).output();
  return new TextDecoder().decode(out.stdout).split('\n').map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === 'deno' && f.slice(2).join(' ').includes(marker)).map((f) => Number(f[0]));
}

Deno.test({
  name:
    'kill -9 of one MPI rank ends the whole job within 10 s, non-zero; the last checkpoint set resumes under mpirun',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const args = [...TINY, '--dp', '2', '--steps', '400', '--ckpt-interval', '5', '--transport', 'mpi', '--out', dir];
    const job = spawnMpirun(2, args);
    let killed = 0;
    for (let t = 0; t < 600 && !killed; t++) {
      await new Promise((r) => setTimeout(r, 100));
      const m = await Deno.readTextFile(`${dir}/ckpt-parallel.json`).then(JSON.parse).catch(() => null);
      if (m?.step >= 10) {
        const [pid] = await ranksOf(dir);
        Deno.kill(pid, 'SIGKILL');
        killed = Date.now();
      }
    }
    ok(killed, 'the job reached a checkpoint at step 10');
    const status = await Promise.race([job.status, new Promise<null>((r) => setTimeout(() => r(null), 10_000))]);
    if (status === null) job.kill('SIGKILL');
    ok(status !== null, 'mpirun ended within 10 s of the kill');
    ok(!status!.success, `exit status ${status!.code} is non-zero`);
    equal((await ranksOf(dir)).length, 0, 'no rank is left running');
    const m = JSON.parse(await Deno.readTextFile(`${dir}/ckpt-parallel.json`));
    ok(m.step >= 10 && m.step % 5 === 0, `the manifest names a complete set (step ${m.step})`);
    // Resume the set under mpirun for two more steps: it continues where the set left off.
    const resumed = await mpirun(2, [
      '--out',
      dir,
      '--resume',
      '--dp',
      '2',
      '--transport',
      'mpi',
      '--steps',
      String(m.step + 2),
    ]);
    equal(resumed.code, 0, resumed.stderr + resumed.stdout);
    match(resumed.stdout, new RegExp(`resuming at step ${m.step}`));
    const steps = await lossSeries(`${dir}/metrics.jsonl`);
    equal(
      steps.length,
      m.step + 2,
      'metrics hold every step once: the killed run up to the set, then the resumed steps',
    );
  },
});

Deno.test({
  name: '--adapter local-rank: each MPI process opens the Dawn adapter of its node-local rank, or says there is none',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const pick = ['--transport', 'mpi', '--gpu', 'dawn', '--adapter', 'local-rank', '--steps', '2'];
    const one = await mpirun(1, [...TINY, ...pick, '--dp', '1', '--out', `${dir}/one`]);
    equal(one.code, 0, one.stderr + one.stdout);
    // This machine has one Dawn adapter (SwiftShader): local rank 1 has no GPU of its own.
    const two = await mpirun(2, [...TINY, ...pick, '--dp', '2', '--out', `${dir}/two`]);
    ok(two.code !== 0);
    match(two.stderr, /rank 1: .*--adapter 1: Dawn found 1 adapter\(s\)/);
    const alone = await runCli('train.ts', [
      ...TINY,
      '--steps',
      '1',
      '--gpu',
      'dawn',
      '--adapter',
      'local-rank',
      '--out',
      `${dir}/x`,
    ]);
    ok(alone.code !== 0);
    match(
      alone.stderr,
      /--adapter local-rank gives each MPI process the GPU of its node-local rank and needs --transport mpi/,
    );
  },
});
