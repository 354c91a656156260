/**
 * Single-rank checkpoints are verified whole: one SHA-256 (`sha256`) covers the canonical header
 * — every tensor entry and metadata value — and the data, and is required. A changed header
 * value, a removed digest, a flipped or truncated byte, or metadata that contradicts itself is
 * refused with an error naming the file and what is wrong; the refused bytes stay as they were.
 * Files written before (only `data_sha256`) are read only with --allow-legacy-checkpoint, which
 * still verifies their data digest. In process on parseCheckpoint, then through `--resume`.
 */
import { deepStrictEqual, equal, match, ok, rejects, throws } from 'node:assert/strict';
import { parseTrainArgs, trainHelp } from '../../src/cli/args.ts';
import { type CheckpointState, encodeCheckpoint, parseCheckpoint } from '../../src/train/checkpoint.ts';
import { parseConfig } from '../../src/train/config.ts';
import { BATCH_ORDER } from '../../src/data/dataset.ts';
import {
  CorruptCheckpointError,
  decodeSafetensors,
  LegacyCheckpointError,
  type NamedTensor,
  upgradeLegacySafetensors,
} from '../../src/util/safetensors.ts';
import { runCli } from '../util/cli.ts';
import { assertUnchanged, flipByte, readHeader, rewriteHeader, snapshot, toLegacy } from './ckpt_tamper.ts';

const cfg = parseConfig({ steps: 4, seed: 7 });
const STATE: CheckpointState = {
  config: cfg,
  tokenizer: { kind: 'char', chars: 'ab' },
  step: 2,
  dataPosition: { seed: 7, step: 2 },
  batchOrder: BATCH_ORDER,
  rngState: 12345,
  valLoss: 1.5,
};
const tensor = (name: string, shape: number[], at: number): NamedTensor => ({
  name,
  shape,
  data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => at + i / 8),
});
const TENSORS = ['', 'optim.m.', 'optim.v.'].flatMap((
  p,
  k,
) => [tensor(`${p}wte`, [2, 3], 10 * k), tensor(`${p}ln.bias`, [3], 10 * k + 5)]);
const good = () => encodeCheckpoint(TENSORS, STATE);

/** Asserts that parseCheckpoint refuses `bytes` with `pattern` (and the file's name) and leaves them unchanged. */
async function refused(bytes: Uint8Array, pattern: RegExp, opts = {}): Promise<void> {
  const copy = bytes.slice();
  await rejects(parseCheckpoint(bytes, 'runs/x/ckpt.safetensors', opts), (e: Error) => {
    ok(e instanceof CorruptCheckpointError, `a CorruptCheckpointError, got ${e}`);
    match(e.message, /checkpoint runs\/x\/ckpt\.safetensors: /);
    match(e.message, pattern);
    return true;
  });
  deepStrictEqual(bytes, copy, 'the refused bytes are unchanged');
}

const DIGEST =
  /contents do not match its SHA-256 'sha256' \(which covers every tensor entry, every metadata value and the data\): the file was altered or truncated\. Only a checkpoint whose digests and contents verify is loaded; the file is left unchanged/;

Deno.test('checkpoint integrity: one sha256 over the canonical header and data; no data-only digest', async () => {
  const bytes = await good();
  const meta = readHeader(bytes).header.__metadata__;
  match(meta.sha256, /^[0-9a-f]{64}$/);
  equal(meta.data_sha256, undefined);
  const ckpt = await parseCheckpoint(bytes, 'x');
  equal(ckpt.legacy, false);
  deepStrictEqual(ckpt.state, STATE);
  deepStrictEqual(Array.from(ckpt.tensors.get('optim.v.ln.bias')!.data), Array.from(TENSORS[5].data));
  // The digest is over the header's meaning: the same header spelled in another key order verifies.
  const reordered = rewriteHeader(bytes, (h) => {
    const m = h.__metadata__;
    h.__metadata__ = Object.fromEntries(Object.entries(m).reverse());
  });
  equal((await parseCheckpoint(reordered, 'x')).state.step, 2);
});

Deno.test('checkpoint integrity: every changed header value is refused by the digest', async () => {
  const bytes = await good();
  const edits: [string, (h: ReturnType<typeof readHeader>['header']) => void][] = [
    ['step 2 → 3', (h) => h.__metadata__.step = '3'],
    ['step and data position together', (h) => {
      h.__metadata__.step = '3';
      h.__metadata__.data_position = JSON.stringify({ seed: 7, step: 3 });
    }],
    ['config (lr)', (h) => h.__metadata__.config = JSON.stringify({ ...cfg, lr: 1 })],
    ['RNG state', (h) => h.__metadata__.rng_state = '12346'],
    ['val loss', (h) => h.__metadata__.val_loss = '0.1'],
    ['an added metadata key', (h) => h.__metadata__.note = 'x'],
    ['a tensor shape', (h) => (h.wte as { shape: number[] }).shape = [3, 2]],
    ['swapped tensor offsets', (h) => {
      const [a, b] = [h['optim.m.wte'], h['optim.v.wte']] as { data_offsets: number[] }[];
      [a.data_offsets, b.data_offsets] = [b.data_offsets, a.data_offsets];
    }],
  ];
  for (const [what, edit] of edits) {
    await refused(rewriteHeader(bytes, edit), DIGEST).catch((e) => {
      throw new Error(`${what}: ${e.message}`);
    });
  }
});

Deno.test('checkpoint integrity: a removed digest, a flipped data byte and a truncated file are refused', async () => {
  const bytes = await good();
  const noDigest = rewriteHeader(bytes, (h) => delete h.__metadata__.sha256);
  await refused(noDigest, /metadata has no 'sha256' digest; every checkpoint must carry one/);
  await refused(flipByte(noDigest), /metadata has no 'sha256' digest/);
  await refused(flipByte(bytes), DIGEST);
  await refused(flipByte(bytes, 40), DIGEST);
  await refused(bytes.subarray(0, bytes.length - 1), DIGEST);
  await refused(bytes.subarray(0, bytes.length - 24), DIGEST);
  await refused(bytes.subarray(0, 100), /header length \d+ exceeds the file's 92 remaining bytes/);
  await refused(bytes.subarray(0, 4), /file is 4 bytes, shorter than the 8-byte header length/);
});

Deno.test('checkpoint integrity: a re-signed file whose metadata contradicts itself is refused', async () => {
  const cases: [Partial<CheckpointState>, RegExp][] = [
    [
      { dataPosition: { seed: 7, step: 3 } },
      /data position is at step 3, the checkpoint at step 2; they must be equal/,
    ],
    [{ dataPosition: { seed: 8, step: 2 } }, /data position seed 8 is not the config's seed 7/],
    [{ step: 5, dataPosition: { seed: 7, step: 5 } }, /step 5 is past the config's 4 steps/],
    [{ rngState: 1.5 }, /metadata 'rng_state' is '1.5', expected a whole number/],
    [{ valLoss: 'low' as unknown as number }, /metadata malformed: valLoss: /],
  ];
  for (const [over, pattern] of cases) await refused(await encodeCheckpoint(TENSORS, { ...STATE, ...over }), pattern);
  await refused(
    await encodeCheckpoint(TENSORS.filter((t) => t.name !== 'optim.v.wte'), STATE),
    /tensor 'wte' \[2,3\] has no 'optim.v.wte' of the same shape/,
  );
  await refused(
    await encodeCheckpoint([...TENSORS, tensor('optim.m.extra', [2], 0)], STATE),
    /tensor 'optim.m.extra' \[2\] has no 'extra'/,
  );
});

Deno.test('checkpoint integrity: a legacy file (data_sha256 only) needs --allow-legacy-checkpoint, which still verifies its data', async () => {
  const legacy = await toLegacy(await good());
  await rejects(parseCheckpoint(legacy, 'old.safetensors'), (e: Error) => {
    ok(e instanceof LegacyCheckpointError);
    match(
      e.message,
      /^Legacy checkpoint old\.safetensors: written before whole-file digests: it carries 'data_sha256' \(data only\), not 'sha256'\. Pass --allow-legacy-checkpoint to read it: every file's 'data_sha256' is still required and verified/,
    );
    return true;
  });
  const ok1 = await parseCheckpoint(legacy, 'old.safetensors', { allowLegacy: true });
  equal(ok1.legacy, true);
  deepStrictEqual(ok1.state, STATE);
  await refused(
    flipByte(legacy),
    /tensor data does not match its legacy SHA-256 'data_sha256': the file was altered or truncated/,
    { allowLegacy: true },
  );
  await refused(rewriteHeader(legacy, (h) => delete h.__metadata__.data_sha256), /no 'sha256' digest/, {
    allowLegacy: true,
  });
  // The legacy digest does not cover the header; the consistency checks still catch a lone step edit.
  await refused(
    rewriteHeader(legacy, (h) => h.__metadata__.step = '3'),
    /data position is at step 2, the checkpoint at step 3/,
    { allowLegacy: true },
  );
  // Upgrading in memory gives a current file with the same content.
  const up = await upgradeLegacySafetensors(legacy, 'old.safetensors');
  const [a, b] = [await decodeSafetensors(up, 'up'), await decodeSafetensors(legacy, 'old', { allowLegacy: true })];
  equal(a.legacy, false);
  deepStrictEqual(a.metadata, b.metadata);
  deepStrictEqual(a.tensors, b.tensors);
});

Deno.test('--allow-legacy-checkpoint: a boolean flag of --resume, listed in --help', () => {
  equal(parseTrainArgs(['--resume', '--out', 'x', '--allow-legacy-checkpoint']).allowLegacyCheckpoint, true);
  equal(parseTrainArgs(['--resume', '--out', 'x']).allowLegacyCheckpoint, false);
  throws(
    () => parseTrainArgs(['--allow-legacy-checkpoint']),
    /--allow-legacy-checkpoint reads an old checkpoint and needs --resume/,
  );
  match(trainHelp(), /--allow-legacy-checkpoint\n +with --resume: read a checkpoint written before whole-file digests/);
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

function oneError(r: { code: number; stderr: string }, pattern: RegExp): void {
  equal(r.code, 1, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
  equal(lines.length, 1, `one error line, got: ${r.stderr}`);
  match(lines[0], pattern);
}

Deno.test({
  name:
    'train --resume: tampered and legacy checkpoints are refused and left unchanged; --allow-legacy-checkpoint resumes a legacy one',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'ckpt-integrity-' });
    const first = await runCli('train.ts', [...TINY, '--out', dir]);
    equal(first.code, 0, first.stderr);
    const file = `${dir}/ckpt.safetensors`, bytes = await Deno.readFile(file);
    const resume = (...more: string[]) => runCli('train.ts', ['--out', dir, '--resume', '--steps', '4', ...more]);
    const cases: [string, Uint8Array, RegExp][] = [
      [
        'step changed',
        rewriteHeader(bytes, (h) => h.__metadata__.step = '1'),
        /Corrupt checkpoint .*ckpt\.safetensors: contents do not match its SHA-256 'sha256'/,
      ],
      [
        'data byte flipped',
        flipByte(bytes),
        /Corrupt checkpoint .*ckpt\.safetensors: contents do not match its SHA-256 'sha256'/,
      ],
      [
        'truncated',
        bytes.subarray(0, bytes.length - 100),
        /Corrupt checkpoint .*ckpt\.safetensors: contents do not match its SHA-256 'sha256'/,
      ],
      [
        'digest removed',
        rewriteHeader(bytes, (h) => delete h.__metadata__.sha256),
        /Corrupt checkpoint .*ckpt\.safetensors: metadata has no 'sha256' digest/,
      ],
      [
        'legacy',
        await toLegacy(bytes),
        /Legacy checkpoint .*ckpt\.safetensors: .*Pass --allow-legacy-checkpoint to read it/,
      ],
    ];
    for (const [what, bad, pattern] of cases) {
      await Deno.writeFile(file, bad);
      const before = await snapshot(dir);
      oneError(await resume(), pattern);
      await assertUnchanged(dir, before, what);
    }
    await Deno.writeFile(file, flipByte(await toLegacy(bytes)));
    let before = await snapshot(dir);
    oneError(await resume('--allow-legacy-checkpoint'), /tensor data does not match its legacy SHA-256 'data_sha256'/);
    await assertUnchanged(dir, before, 'flipped legacy file with the flag');

    await Deno.writeFile(file, await toLegacy(bytes));
    before = await snapshot(dir);
    const r = await resume('--allow-legacy-checkpoint');
    equal(r.code, 0, r.stderr);
    match(r.stdout, /legacy checkpoint, its data_sha256 verified/);
    match(r.stdout, /resuming at step 2/);
    const now = await Deno.readFile(file);
    const meta = readHeader(now).header.__metadata__;
    ok(meta.sha256 && meta.data_sha256 === undefined, 'the next checkpoint is in the current format');
    equal((await parseCheckpoint(now, file)).state.step, 4);
    ok(before.get('ckpt.safetensors'), 'the legacy file was there before');
    await Deno.remove(dir, { recursive: true });
  },
});
