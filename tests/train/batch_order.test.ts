/**
 * Checkpoints record the batch order their run drew rows in (data/dataset.ts BATCH_ORDER). A file
 * from before orders were recorded resumes where both orders read the same rows (one micro-batch
 * per step) and is refused, naming why and what to do, where they do not (gradient accumulation,
 * a plan's micro-batches): single-rank through `--resume`, parallel sets once, on the host
 * (loadCheckpointSet); ranks restore what the host checked (restoreRankState does not re-check).
 */
import { deepStrictEqual, equal, match, ok, rejects, throws } from 'node:assert/strict';
import { type CheckpointState, encodeCheckpoint, parseCheckpoint } from '../../src/train/checkpoint.ts';
import { parseConfig } from '../../src/train/config.ts';
import { BATCH_ORDER, checkBatchOrder } from '../../src/data/dataset.ts';
import { CorruptCheckpointError, decodeSafetensors, encodeSafetensors } from '../../src/util/safetensors.ts';
import { loadCheckpointSet, saveCheckpointSet } from '../../src/io/checkpoint_set.ts';
import { decodeRankState, encodeRankTensors, restoreRankState } from '../../src/parallel/run/rank_checkpoint.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { runCli } from '../util/cli.ts';
import { assertUnchanged, snapshot, withoutBatchOrder } from './ckpt_tamper.ts';

const OLD_ORDER =
  /was written under batch order 1 \(before batch orders were recorded\), this build draws batch order 2: with 2 micro-batches per step the two draw different rows/;

Deno.test('checkpoint: batch_order is written, read back, absent on old files, and must be a whole number', async () => {
  const cfg = parseConfig({ steps: 4, seed: 7 });
  const state: CheckpointState = {
    config: cfg,
    tokenizer: { kind: 'char', chars: 'ab' },
    step: 2,
    dataPosition: { seed: 7, step: 2 },
    rngState: 1,
    valLoss: null,
  };
  const tensors = ['', 'optim.m.', 'optim.v.'].map((p) => ({ name: `${p}w`, shape: [2], data: new Float32Array(2) }));
  const bytes = await encodeCheckpoint(tensors, state);
  equal((await parseCheckpoint(bytes, 'new')).state.batchOrder, BATCH_ORDER);
  equal((await parseCheckpoint(await withoutBatchOrder(bytes), 'old')).state.batchOrder, undefined);
  const resigned = async (order: string) => {
    const { tensors: t, metadata } = await decodeSafetensors(bytes, 'new');
    return await encodeSafetensors([...t.values()], { ...metadata, batch_order: order });
  };
  await rejects(
    parseCheckpoint(await resigned('two'), 'x'),
    /metadata 'batch_order' is 'two', expected a whole number/,
  );
  await rejects(parseCheckpoint(await resigned('0'), 'x'), /metadata malformed: .*batchOrder/);
});

const rankFile = (plan: ParallelPlan, rank: number) =>
  encodeRankTensors({ params: Float32Array.from([rank, 1]) }, {
    plan,
    config: { lr: 0.1 },
    rank,
    worldSize: 2,
    step: 2,
    kind: 'mesh',
  });

Deno.test('parallel checkpoints: an old-order set with 2 micro-batches is refused once, on the host; with 1 it loads', async () => {
  const noGpu = { write: () => {} } as unknown as Gpu;
  for (const m of [1, 2]) {
    const plan = makePlan({ dp: 2, microBatches: m });
    const fresh = await rankFile(plan, 0);
    equal((await decodeRankState(fresh, 'r0')).meta.batchOrder, BATCH_ORDER);
    const old = [await withoutBatchOrder(fresh), await withoutBatchOrder(await rankFile(plan, 1))];
    const loaded = await decodeRankState(old[0], 'rank 0');
    equal(loaded.meta.batchOrder, undefined);
    const expect = { plan, rank: 0, worldSize: 2, kind: 'mesh' };
    const dir = await Deno.makeTempDir({ prefix: 'batch-order-' });
    await saveCheckpointSet(dir, 2, old, plan, false);
    if (m === 1) {
      equal(restoreRankState(noGpu, {}, loaded, expect, 'rank 0'), 2);
      equal((await loadCheckpointSet(dir)).manifest.step, 2);
      equal(restoreRankState(noGpu, {}, await decodeRankState(fresh, 'r0'), expect, 'rank 0'), 2);
    } else {
      // The host's one check, on the file a rank would be handed: the same function, the same message.
      throws(() => checkBatchOrder(loaded.meta.batchOrder, plan.microBatches, "rank 0's checkpoint"), OLD_ORDER);
      // A rank trusts the host: restoring does not re-check the order.
      equal(restoreRankState(noGpu, {}, loaded, expect, 'rank 0'), 2);
      const before = await snapshot(dir);
      await rejects(loadCheckpointSet(dir), (e: Error) => {
        ok(!(e instanceof CorruptCheckpointError), 'an old order is no corruption');
        match(e.message, /rank-0\.safetensors was written under batch order 1/);
        match(e.message, OLD_ORDER);
        return true;
      });
      await assertUnchanged(dir, before, 'refused set');
      // Written by this build: the same plan resumes.
      equal(restoreRankState(noGpu, {}, await decodeRankState(fresh, 'r0'), expect, 'rank 0'), 2);
    }
    await Deno.remove(dir, { recursive: true });
  }
});

const TINY = ['--n-layer', '1', '--n-embd', '16', '--n-head', '2', '--block-size', '16', '--batch-size', '4'];
const RUN = [...TINY, '--steps', '2', '--eval-interval', '2', '--eval-batches', '1', '--sample-tokens', '0'];

Deno.test({
  name:
    'train --resume: an old-order checkpoint with --grad-accum 2 is refused and left unchanged; a plain one resumes',
  sanitizeResources: false,
  fn: async () => {
    for (const accum of ['2', '1']) {
      const dir = await Deno.makeTempDir({ prefix: 'batch-order-cli-' });
      const first = await runCli('train.ts', [...RUN, '--grad-accum', accum, '--out', dir]);
      equal(first.code, 0, first.stderr);
      const file = `${dir}/ckpt.safetensors`;
      await Deno.writeFile(file, await withoutBatchOrder(await Deno.readFile(file)));
      const before = await snapshot(dir);
      const r = await runCli('train.ts', ['--out', dir, '--resume', '--steps', '3']);
      if (accum === '2') {
        equal(r.code, 1, r.stderr);
        const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
        equal(lines.length, 1, r.stderr);
        match(lines[0], /ckpt\.safetensors was written under batch order 1/);
        match(lines[0], OLD_ORDER);
        match(lines[0], /Resume it with the build that wrote it, or start a new run/);
        await assertUnchanged(dir, before, 'refused resume');
      } else {
        equal(r.code, 0, r.stderr);
        match(r.stdout, /resuming at step 2/);
        deepStrictEqual((await parseCheckpoint(await Deno.readFile(file), file)).state.batchOrder, BATCH_ORDER);
      }
      await Deno.remove(dir, { recursive: true });
    }
  },
});
