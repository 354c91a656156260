/**
 * A parallel checkpoint set is verified whole (src/io/checkpoint_set.ts): the manifest
 * carries its own SHA-256 and each rank file's; loadCheckpointSet refuses an edited manifest, an
 * altered, truncated or swapped rank file, and a file whose step, rank or plan disagree with the
 * manifest even when a tamperer re-signs the manifest — leaving every file as it was. A legacy set
 * is read only with allowLegacy (data digests still verified) and comes back upgraded in memory.
 * In process on the load functions, then through `npm run train -- --dp 2 --resume`.
 */
import { deepStrictEqual, equal, match, ok, rejects } from 'node:assert/strict';
import { loadCheckpointSet, parallelCheckpointFiles, saveCheckpointSet } from '../../src/io/checkpoint_set.ts';
import { decodeRankState, encodeRankTensors } from '../../src/parallel/run/rank_checkpoint.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { canonicalJson, sha256Hex } from '../../src/util/digest.ts';
import { CorruptCheckpointError, decodeSafetensors } from '../../src/util/safetensors.ts';
import { runCli } from '../util/cli.ts';
import { assertUnchanged, flipByte, rewriteHeader, snapshot, toLegacy } from '../train/ckpt_tamper.ts';

const plan = makePlan({ dp: 2 });
const rankFile = (rank: number, step = 2) =>
  encodeRankTensors({ params: Float32Array.from([rank, 1, 2, 3]), 'adam.m': new Float32Array(4).fill(0.5) }, {
    plan,
    config: { lr: 0.1 },
    rank,
    worldSize: 2,
    step,
    kind: 'dp',
  });

/** A run directory holding one verified set after 2 steps. */
async function setDir(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: 'ckpt-set-' });
  await saveCheckpointSet(dir, 2, [await rankFile(0), await rankFile(1)], plan, false);
  return dir;
}
const manifestPath = (dir: string) => parallelCheckpointFiles(dir).manifest;
const rank = (dir: string, r: number) => `${dir}/ckpt-parallel-2/rank-${r}.safetensors`;
async function editManifest(dir: string, edit: (m: Record<string, unknown>) => void, resign = false): Promise<void> {
  const m = JSON.parse(await Deno.readTextFile(manifestPath(dir)));
  edit(m);
  if (resign) {
    const { sha256: _, ...body } = m;
    m.sha256 = await sha256Hex(new TextEncoder().encode(canonicalJson(body)));
  }
  await Deno.writeTextFile(manifestPath(dir), JSON.stringify(m, null, 2));
}

/** Asserts loadCheckpointSet refuses `dir` with `pattern` and leaves every file byte-for-byte unchanged. */
async function refused(dir: string, pattern: RegExp, opts = {}): Promise<void> {
  const before = await snapshot(dir);
  await rejects(loadCheckpointSet(dir, opts), (e: Error) => {
    ok(e instanceof CorruptCheckpointError, `a CorruptCheckpointError, got ${e}`);
    match(e.message, pattern);
    return true;
  });
  await assertUnchanged(dir, before, String(pattern));
  await Deno.remove(dir, { recursive: true });
}

Deno.test("checkpoint set: the manifest records each rank file's SHA-256 and its own; an intact set loads", async () => {
  const dir = await setDir();
  const m = JSON.parse(await Deno.readTextFile(manifestPath(dir)));
  deepStrictEqual(m.fileSha256, [
    await sha256Hex(await Deno.readFile(rank(dir, 0))),
    await sha256Hex(await Deno.readFile(rank(dir, 1))),
  ]);
  match(m.sha256, /^[0-9a-f]{64}$/);
  const { manifest, shards } = await loadCheckpointSet(dir);
  equal(manifest.step, 2);
  deepStrictEqual(shards, [await Deno.readFile(rank(dir, 0)), await Deno.readFile(rank(dir, 1))]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test('checkpoint set: an edited manifest is refused', async () => {
  const digest =
    /ckpt-parallel\.json: contents do not match its SHA-256 'sha256' \(which covers every other key\): the manifest was edited/;
  let dir = await setDir();
  await editManifest(dir, (m) => m.step = 3);
  await refused(dir, digest);
  dir = await setDir();
  await editManifest(dir, (m) => (m.fileSha256 as string[])[1] = '0'.repeat(64));
  await refused(dir, digest);
  dir = await setDir();
  await editManifest(dir, (m) => m.keep = true);
  await refused(dir, digest);
  dir = await setDir();
  await editManifest(dir, (m) => delete m.sha256);
  await refused(dir, /has only one of 'sha256' and 'fileSha256'/);
  dir = await setDir();
  await editManifest(dir, (m) => m.files = 'rank-0.safetensors');
  await refused(dir, /manifest malformed: files: /);
  // A re-signed manifest still has to agree with its folder and with every file's own metadata.
  dir = await setDir();
  await editManifest(dir, (m) => m.step = 3, true);
  await refused(dir, /names folder 'ckpt-parallel-2', a set taken at step 3 is in 'ckpt-parallel-3'/);
  dir = await setDir();
  await editManifest(dir, (m) => m.dir = '../elsewhere', true);
  await refused(dir, /names folder '\.\.\/elsewhere'/);
});

Deno.test('checkpoint set: altered, truncated, swapped and inconsistent rank files are refused', async () => {
  const mismatch = (r: number) =>
    new RegExp(
      `rank-${r}\\.safetensors: its SHA-256 [0-9a-f]{64} is not the [0-9a-f]{64} that .*ckpt-parallel\\.json records for rank ${r} \\(altered, truncated or swapped file\\)`,
    );
  let dir = await setDir();
  await Deno.writeFile(rank(dir, 1), flipByte(await Deno.readFile(rank(dir, 1))));
  await refused(dir, mismatch(1));
  dir = await setDir();
  await Deno.writeFile(rank(dir, 0), (await Deno.readFile(rank(dir, 0))).subarray(0, 100));
  await refused(dir, mismatch(0));
  dir = await setDir();
  const [a, b] = [await Deno.readFile(rank(dir, 0)), await Deno.readFile(rank(dir, 1))];
  await Deno.writeFile(rank(dir, 0), b);
  await Deno.writeFile(rank(dir, 1), a);
  await refused(dir, mismatch(0));
  // Swapped files under a manifest re-signed to match them: the files' own rank gives it away.
  dir = await setDir();
  await Deno.writeFile(rank(dir, 0), b);
  await Deno.writeFile(rank(dir, 1), a);
  await editManifest(dir, (m) => m.fileSha256 = (m.fileSha256 as string[]).reverse(), true);
  await refused(dir, /rank-0\.safetensors: holds step 2, rank 1 of 2, .*; the manifest .* expects step 2, rank 0 of 2/);
  // A file of another step, re-signed and recorded: it does not belong to this set.
  dir = await setDir();
  const other = await rankFile(1, 4);
  await Deno.writeFile(rank(dir, 1), other);
  const otherSha = await sha256Hex(other);
  await editManifest(dir, (m) => (m.fileSha256 as string[])[1] = otherSha, true);
  await refused(dir, /rank-1\.safetensors: holds step 4, rank 1 of 2/);
  dir = await setDir();
  await Deno.remove(rank(dir, 1));
  await refused(dir, /rank-1\.safetensors: the manifest names it but the file is missing/);
});

Deno.test('checkpoint set: decodeRankState refuses a changed header value and an impossible rank', async () => {
  const good = await rankFile(1);
  for (
    const [k, v] of [['step', '3'], ['rank', '0'], ['plan', JSON.stringify({ ...plan, zero: 1 })], [
      'config',
      '{"lr":1}',
    ]]
  ) {
    await rejects(
      decodeRankState(rewriteHeader(good, (h) => h.__metadata__[k] = v), 'r1'),
      /Corrupt checkpoint r1: contents do not match its SHA-256 'sha256'/,
      k,
    );
  }
  const bad = await encodeRankTensors({ params: new Float32Array(1) }, {
    plan,
    config: {},
    rank: 2,
    worldSize: 2,
    step: 2,
    kind: 'dp',
  });
  await rejects(decodeRankState(bad, 'r2'), /rank 2 is outside its world of 2 ranks/);
  const world = await encodeRankTensors({ params: new Float32Array(1) }, {
    plan,
    config: {},
    rank: 0,
    worldSize: 4,
    step: 2,
    kind: 'dp',
  });
  await rejects(decodeRankState(world, 'r0'), /world size 4 is not its plan's 2 ranks/);
});

/** Rewrites the set in `dir` as written before digests: legacy rank files and a manifest without digests. */
async function makeLegacy(dir: string): Promise<void> {
  for (const r of [0, 1]) await Deno.writeFile(rank(dir, r), await toLegacy(await Deno.readFile(rank(dir, r))));
  await editManifest(dir, (m) => {
    delete m.sha256;
    delete m.fileSha256;
  });
}

Deno.test('checkpoint set: a legacy set needs allowLegacy, still verifies each data digest, and loads upgraded in memory', async () => {
  let dir = await setDir();
  await makeLegacy(dir);
  await refused(
    dir,
    /^Legacy checkpoint .*ckpt-parallel\.json: written before manifest digests.*Pass --allow-legacy-checkpoint/,
  );
  dir = await setDir();
  await makeLegacy(dir);
  await Deno.writeFile(rank(dir, 1), flipByte(await Deno.readFile(rank(dir, 1))));
  await refused(dir, /rank-1\.safetensors: tensor data does not match its legacy SHA-256 'data_sha256'/, {
    allowLegacy: true,
  });
  dir = await setDir();
  await makeLegacy(dir);
  const before = await snapshot(dir);
  const { shards } = await loadCheckpointSet(dir, { allowLegacy: true });
  for (const [r, s] of shards.entries()) {
    const cur = await decodeSafetensors(s, `shard ${r}`);
    equal(cur.legacy, false, 'handed to the ranks in the current format');
    deepStrictEqual(Array.from(cur.tensors.get('params')!.data), [r, 1, 2, 3]);
  }
  await assertUnchanged(dir, before, 'loading a legacy set');
  // The next set replaces the legacy one: a current manifest, and the legacy folder removed.
  await saveCheckpointSet(dir, 4, [await rankFile(0, 4), await rankFile(1, 4)], plan, false);
  equal((await loadCheckpointSet(dir)).manifest.step, 4);
  ok(
    !(await Deno.stat(`${dir}/ckpt-parallel-2`).then(() => true, () => false)),
    'the legacy set is removed once replaced',
  );
  await Deno.remove(dir, { recursive: true });
});

const TINY = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--steps',
  '2',
  '--eval-interval',
  '1',
  '--eval-batches',
  '1',
  '--sample-tokens',
  '0',
];

Deno.test({
  name:
    'train --dp 2 --resume: an edited manifest, swapped or altered rank files and a legacy set are refused unchanged; --allow-legacy-checkpoint resumes it',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'ckpt-set-cli-' });
    const first = await runCli('train.ts', ['--dp', '2', ...TINY, '--out', dir]);
    equal(first.code, 0, first.stderr);
    const original = await snapshot(dir);
    const restore = async () => {
      for (const [p, b] of original) await Deno.writeFile(`${dir}/${p}`, b);
    };
    const resume = (...more: string[]) =>
      runCli('train.ts', ['--resume', '--out', dir, '--dp', '2', '--steps', '4', ...more]);
    const [r0, r1] = [
      original.get('ckpt-parallel-2/rank-0.safetensors')!,
      original.get('ckpt-parallel-2/rank-1.safetensors')!,
    ];
    const cases: [string, () => Promise<void>, RegExp][] = [
      [
        'rank files swapped',
        async () => {
          await Deno.writeFile(rank(dir, 0), r1);
          await Deno.writeFile(rank(dir, 1), r0);
        },
        /error: Corrupt checkpoint .*rank-0\.safetensors: its SHA-256 .* records for rank 0 \(altered, truncated or swapped file\)/,
      ],
      [
        'rank file step changed',
        () => Deno.writeFile(rank(dir, 1), rewriteHeader(r1, (h) => h.__metadata__.step = '1')),
        /error: Corrupt checkpoint .*rank-1\.safetensors: its SHA-256/,
      ],
      [
        'manifest step changed',
        () => editManifest(dir, (m) => m.step = 1),
        /error: Corrupt checkpoint .*ckpt-parallel\.json: contents do not match its SHA-256 'sha256'/,
      ],
      [
        'manifest file digest changed',
        () => editManifest(dir, (m) => (m.fileSha256 as string[])[0] = 'f'.repeat(64)),
        /error: Corrupt checkpoint .*ckpt-parallel\.json: contents do not match/,
      ],
      [
        'legacy set',
        () => makeLegacy(dir),
        /error: Legacy checkpoint .*ckpt-parallel\.json: .*Pass --allow-legacy-checkpoint/,
      ],
    ];
    for (const [what, tamper, pattern] of cases) {
      await restore();
      await tamper();
      const before = await snapshot(dir);
      const r = await resume();
      equal(r.code, 1, `${what}: exit 1 (stderr: ${r.stderr})`);
      match(r.stderr, pattern, what);
      await assertUnchanged(dir, before, what);
    }
    const r = await resume('--allow-legacy-checkpoint');
    equal(r.code, 0, r.stderr);
    match(r.stdout, /resuming at step 2/);
    const { manifest } = await loadCheckpointSet(dir);
    equal(manifest.step, 4, 'the legacy-resumed run wrote a current, verified set');
    await Deno.remove(dir, { recursive: true });
  },
});
