/**
 * Ctrl-C / SIGTERM mid-run (src/cli/stop.ts): the run finishes its step, saves a checkpoint of
 * it, prints the command that resumes it and exits 130 / 143; that command continues the
 * uninterrupted run's losses step for step. Single rank and dp2.
 */
import { deepStrictEqual, equal as assertEquals, ok as assert } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN } from '../util/cli.ts';
import { spawnUntil } from '../util/spawn_until.ts';

const TINY = TINY_RUN;

const baselines = new Map<string, Promise<number[]>>();

/** The losses of the uninterrupted run of `flags` (one run per flag set and test process). */
function baseline(flags: string[]): Promise<number[]> {
  const key = flags.join(' ');
  if (!baselines.has(key)) {
    baselines.set(
      key,
      (async () => {
        const dir = await Deno.makeTempDir({ prefix: 'signals-base-' });
        const r = await runCli('train.ts', [...flags, '--out', dir]);
        if (r.code !== 0) throw new Error(`baseline run failed: ${r.stdout}\n${r.stderr}`);
        const l = await lossSeries(`${dir}/metrics.jsonl`);
        await Deno.remove(dir, { recursive: true });
        return l;
      })(),
    );
  }
  return baselines.get(key)!;
}

async function stopAndResume(signal: 'SIGINT' | 'SIGTERM', parallel: string[], steps: number) {
  const flags = [...TINY, '--steps', String(steps), ...parallel];
  const base = baseline(flags);
  const dir = await Deno.makeTempDir({ prefix: 'signals-' });
  try {
    const run = spawnUntil('train.ts', [...flags, '--out', dir]);
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
    assert(done >= 3 && done < steps, `stopped after ${done} of ${steps} steps`);
    const resume = `npm run train -- --out ${dir} --resume${parallel.length ? ` ${parallel.join(' ')}` : ''}`;
    assert(r.stdout.includes(`resume with: ${resume}\n`), `expected '${resume}' in:\n${r.stdout}`);
    // The checkpoint holds exactly the finished steps, and so do the metrics.
    if (parallel.length) {
      assertEquals(JSON.parse(await Deno.readTextFile(`${dir}/ckpt-parallel.json`)).step, done);
    } else await Deno.stat(`${dir}/ckpt.safetensors`);
    assertEquals((await lossSeries(`${dir}/metrics.jsonl`)).length, done);

    const rest = await runCli('train.ts', ['--out', dir, '--resume', ...parallel]);
    if (rest.code !== 0) throw new Error(`the resumed run failed: ${rest.stdout}\n${rest.stderr}`);
    const got = await lossSeries(`${dir}/metrics.jsonl`), want = await base;
    assertEquals(got.length, steps);
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

// Single-rank steps of the tiny model take ~25 ms: enough of them that the signal lands mid-run.
Deno.test('SIGINT mid-run saves the finished step, exits 130, and --resume continues exactly (single rank)', () =>
  stopAndResume('SIGINT', [], 60));
Deno.test('SIGTERM mid-run saves the finished step, exits 143, and --resume continues exactly (single rank)', () =>
  stopAndResume('SIGTERM', [], 60));
Deno.test('SIGINT mid-run saves every rank, exits 130, and --resume continues exactly (dp2)', () =>
  stopAndResume('SIGINT', ['--dp', '2'], 24));
Deno.test('SIGTERM mid-run saves every rank, exits 143, and --resume continues exactly (dp2)', () =>
  stopAndResume('SIGTERM', ['--dp', '2'], 24));

Deno.test('a second SIGINT exits at once; the checkpoint on disk is still a whole one that resumes', async () => {
  const dir = await Deno.makeTempDir({ prefix: 'signals-twice-' });
  try {
    // Steps of ~0.2 s, so the second signal lands while the first one's step is still running.
    const wide = ['--n-layer', '2', '--n-embd', '96', '--block-size', '64', '--batch-size', '16'];
    const run = spawnUntil('train.ts', [...TINY, ...wide, '--steps', '400', '--ckpt-interval', '1', '--out', dir]);
    await run.waitFor(/^step +2 \|/m);
    run.child.kill('SIGINT');
    await run.waitFor(/^SIGINT: stopping after the current step/m); // two signals sent at once would merge into one
    run.child.kill('SIGINT');
    const r = await run.done();
    assertEquals(r.code, 130, r.stderr);
    assert(/again: exiting now/.test(r.stderr), r.stderr);
    assert(!/resume with:/.test(r.stdout), 'the second signal must not wait for a save');
    const left = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n.endsWith('.tmp'));
    deepStrictEqual(left, [], `temp files of the interrupted write: ${left.join(', ')}\n${r.stderr}`);
    const rest = await runCli('train.ts', ['--out', dir, '--resume', '--steps', '12']);
    assertEquals(rest.code, 0, `the checkpoint left by a double Ctrl-C does not resume: ${rest.stderr}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
