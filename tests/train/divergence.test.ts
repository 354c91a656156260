/**
 * A diverging run never saves over its last good checkpoint (src/train/finite.ts): resuming a
 * healthy run at `--lr 1e6 --ckpt-interval 1`, and a fresh run at `--lr 1e30`, stop with an
 * error naming the step and the checkpoint kept (so does `--lr 1e39`, whose weights are non-finite); the run directory's checkpoint files are
 * byte-for-byte those of the healthy run (or there are none), and resuming at a sane LR works.
 * Single rank and dp2; the dp2 runs also leave no rank-worker folder in their temp dir.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';

const TINY = TINY_RUN;

/** Every checkpoint file of a run directory (single-rank files, the manifest, rank files), path → bytes. */
async function checkpointFiles(dir: string): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const walk = async (d: string) => {
    for await (const e of Deno.readDir(d)) {
      const p = `${d}/${e.name}`;
      if (e.isDirectory && e.name.startsWith('ckpt-parallel-')) await walk(p);
      else if (
        e.isFile && /^(ckpt.*\.safetensors|ckpt-parallel\.json|rank-\d+\.safetensors)$/.test(e.name)
      ) out.set(p.slice(dir.length + 1), await Deno.readFile(p));
      else if (e.isFile && e.name.endsWith('.tmp')) throw new Error(`temp file left behind: ${p}`);
    }
  };
  await walk(dir);
  return out;
}

function sameFiles(
  got: Map<string, Uint8Array>,
  want: Map<string, Uint8Array>,
  what: string,
): void {
  equal(
    [...got.keys()].sort().join(', '),
    [...want.keys()].sort().join(', '),
    `${what}: checkpoint files`,
  );
  for (const [p, b] of want) {
    ok(
      got.get(p)!.length === b.length && got.get(p)!.every((x, i) => x === b[i]),
      `${what}: ${p} changed`,
    );
  }
}

async function rankWorkerDirs(tmp: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(tmp)) if (e.name.startsWith('rank-worker-')) out.push(e.name);
  return out;
}

async function diverge(parallel: string[]) {
  const dir = await Deno.makeTempDir({ prefix: 'diverge-' }),
    fresh = await Deno.makeTempDir({ prefix: 'diverge-fresh-' });
  const tmp = await Deno.makeTempDir({ prefix: 'diverge-tmp-' }), env = { TMPDIR: tmp };
  const train = async (args: string[], code: number) => {
    const r = await runCli('train.ts', [...args, ...parallel], env);
    if (r.code !== code) {
      throw new Error(`expected exit ${code}, got ${r.code}:\n${r.stdout}\n${r.stderr}`);
    }
    if (parallel.length) {
      equal((await rankWorkerDirs(tmp)).join(', '), '', 'rank-worker folders left in the temp dir');
    }
    return r;
  };
  try {
    await train([...TINY, '--steps', '4', '--out', dir], 0);
    const healthy = await checkpointFiles(dir);
    ok(healthy.size > 0);

    const up = await train([
      '--out',
      dir,
      '--resume',
      '--steps',
      '60',
      '--lr',
      '1e6',
      '--ckpt-interval',
      '1',
    ], 1);
    match(
      up.stderr,
      /^error: step \d+: .*(non-finite|diverged|loss became).*; the last good checkpoint \(step 4\) in \S+ is kept; lower --lr/m,
    );
    sameFiles(await checkpointFiles(dir), healthy, '--lr 1e6');
    await train(['--out', dir, '--resume', '--steps', '8', '--lr', '1e-3'], 0);

    const blow = await train([
      ...TINY,
      '--steps',
      '6',
      '--lr',
      '1e30',
      '--ckpt-interval',
      '1',
      '--out',
      fresh,
    ], 1);
    match(
      blow.stderr,
      /^error: step [01]: .*; no checkpoint was saved in \S+ \(none was good\); lower --lr/m,
    );
    equal((await checkpointFiles(fresh)).size, 0, '--lr 1e30 saved a checkpoint');

    // An LR past f32's range makes the weights themselves non-finite: the GPU count catches them.
    await Deno.remove(fresh, { recursive: true });
    const inf = await train([
      ...TINY,
      '--steps',
      '3',
      '--lr',
      '1e39',
      '--warmup',
      '0',
      '--ckpt-interval',
      '1',
      '--out',
      fresh,
    ], 1);
    match(
      inf.stderr,
      /^error: step 0: [\d ]+ non-finite values in parameters\/optimizer state after the update.*; no checkpoint was saved/m,
    );
    if (parallel.length) match(inf.stderr, /\(rank 0: [\d ]+, rank 1: [\d ]+\)/);
    equal((await checkpointFiles(fresh)).size, 0, '--lr 1e39 saved a checkpoint');
  } finally {
    for (const d of [dir, fresh, tmp]) await Deno.remove(d, { recursive: true });
  }
}

Deno.test('a diverging run keeps the last good checkpoint byte for byte (single rank)', () => diverge([]));
Deno.test('a diverging run keeps the last good checkpoint set byte for byte (dp2)', () => diverge(['--dp', '2']));
