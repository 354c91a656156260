/**
 * Ctrl-C / SIGTERM mid-run (src/cli/stop.ts): the run finishes its step, saves a checkpoint of
 * it, prints the command that resumes it and exits 130 / 143; that command continues the
 * uninterrupted run's losses step for step. Single rank and dp2.
 */
import { deepStrictEqual, equal as assertEquals, ok as assert } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN } from '../util/cli.ts';
import { spawnUntil } from '../util/spawn_until.ts';

const TINY = TINY_RUN;

/** The LR schedule's decay length, fixed so that a run's losses do not depend on its --steps. */
const DECAY = ['--decay-steps', '100'];

/** The losses of the uninterrupted run of `flags`. */
async function baseline(flags: string[]): Promise<number[]> {
  const dir = await Deno.makeTempDir({ prefix: 'signals-base-' });
  try {
    const r = await runCli('train.ts', [...flags, '--out', dir]);
    if (r.code !== 0) throw new Error(`baseline run failed: ${r.stdout}\n${r.stderr}`);
    return await lossSeries(`${dir}/metrics.jsonl`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Stops a run with `signal` once it has logged step 2, resumes it to a few steps past the stop,
 * and compares with the uninterrupted run of that length. The stopped run is asked for far more
 * steps than it could finish, so the signal always lands mid-run however fast the steps are.
 */
async function stopAndResume(signal: 'SIGINT' | 'SIGTERM', parallel: string[]) {
  const flags = [...TINY, ...DECAY, ...parallel];
  const dir = await Deno.makeTempDir({ prefix: 'signals-' });
  try {
    const run = spawnUntil('train.ts', [...flags, '--steps', '100000', '--out', dir]);
    await run.waitFor(/^step +2 \|/m);
    run.child.kill(signal);
    const r = await run.done();
    if (r.code !== (signal === 'SIGINT' ? 130 : 143)) {
      throw new Error(`exit ${r.code} (signal ${r.signal}):\n${r.stdout}\n${r.stderr}`);
    }
    const m = /stopped by (SIG\w+) after step (\d+) \((\d+) steps done\)/.exec(r.stdout);
    assert(m, `no stop line in:\n${r.stdout}`);
    assertEquals(m[1], signal);
    const done = Number(m[3]);
    assert(done >= 3, `stopped after ${done} steps, before the step 2 it had logged`);
    const resume = `npm run train -- --out ${dir} --resume${parallel.length ? ` ${parallel.join(' ')}` : ''}`;
    assert(r.stdout.includes(`resume with: ${resume}\n`), `expected '${resume}' in:\n${r.stdout}`);
    // The checkpoint holds exactly the finished steps, and so do the metrics.
    if (parallel.length) {
      assertEquals(JSON.parse(await Deno.readTextFile(`${dir}/ckpt-parallel.json`)).step, done);
    } else await Deno.stat(`${dir}/ckpt.safetensors`);
    assertEquals((await lossSeries(`${dir}/metrics.jsonl`)).length, done);

    const steps = done + 4;
    const rest = await runCli('train.ts', ['--out', dir, '--resume', '--steps', String(steps), ...parallel]);
    if (rest.code !== 0) throw new Error(`the resumed run failed: ${rest.stdout}\n${rest.stderr}`);
    const got = await lossSeries(`${dir}/metrics.jsonl`), want = await baseline([...flags, '--steps', String(steps)]);
    assertEquals(got.length, steps);
    assertEquals(want.length, steps);
    for (let s = 0; s < steps; s++) {
      assert(
        Math.abs(got[s] - want[s]) <= 1e-5,
        `step ${s}: loss ${got[s]} after the stop, ${want[s]} uninterrupted`,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test('SIGINT mid-run saves the finished step, exits 130, and --resume continues exactly (single rank)', () =>
  stopAndResume('SIGINT', []));
Deno.test('SIGTERM mid-run saves the finished step, exits 143, and --resume continues exactly (single rank)', () =>
  stopAndResume('SIGTERM', []));
Deno.test('SIGINT mid-run saves every rank, exits 130, and --resume continues exactly (dp2)', () =>
  stopAndResume('SIGINT', ['--dp', '2']));
Deno.test('SIGTERM mid-run saves every rank, exits 143, and --resume continues exactly (dp2)', () =>
  stopAndResume('SIGTERM', ['--dp', '2']));

/**
 * A run with a checkpoint every step, SIGINT after step 2 and again once the first is
 * acknowledged. The second signal counts only when it lands before the first one's step and save
 * end: then the run says "again: exiting now". When the step and save finished first (the run
 * printed its resume line instead), the attempt is repeated with steps `--grad-accum` times longer.
 */
async function doubleSigint(dir: string, accum: number) {
  const wide = ['--n-layer', '2', '--n-embd', '96', '--block-size', '64', '--batch-size', '16'];
  const run = spawnUntil('train.ts', [
    ...[...TINY, ...wide, '--grad-accum', String(accum), '--steps', '100000', '--ckpt-interval', '1', '--out', dir],
  ]);
  await run.waitFor(/^step +2 \|/m);
  run.child.kill('SIGINT');
  await run.waitFor(/^SIGINT: stopping after the current step/m); // two signals sent at once would merge into one
  try {
    run.child.kill('SIGINT');
  } catch {
    // Already gone: the first signal's step and save won the race; the outcome below says so.
  }
  const r = await run.done();
  const landed = /again: exiting now/.test(r.stderr);
  if (!landed) {
    // The only other outcome allowed: the graceful stop of the first signal, complete.
    assertEquals(r.code, 130, r.stderr);
    assert(/resume with:/.test(r.stdout), `neither stop completed:\n${r.stdout}\n${r.stderr}`);
  }
  return { landed, r };
}

Deno.test('a second SIGINT exits at once; the checkpoint on disk is still a whole one that resumes', async () => {
  for (const accum of [1, 16]) {
    const dir = await Deno.makeTempDir({ prefix: 'signals-twice-' });
    try {
      const { landed, r } = await doubleSigint(dir, accum);
      if (!landed) continue;
      console.log(`the second SIGINT landed mid-step at --grad-accum ${accum}`);
      assertEquals(r.code, 130, r.stderr);
      assert(!/resume with:/.test(r.stdout), 'the second signal must not wait for a save');
      const left = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n.endsWith('.tmp'));
      deepStrictEqual(left, [], `temp files of the interrupted write: ${left.join(', ')}\n${r.stderr}`);
      const rest = await runCli('train.ts', ['--out', dir, '--resume', '--steps', '12']);
      assertEquals(rest.code, 0, `the checkpoint left by a double Ctrl-C does not resume: ${rest.stderr}`);
      return;
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  throw new Error(
    "the second SIGINT never landed before the first one's step and save ended, even at --grad-accum 16",
  );
});
