/**
 * ZeRO frees buffers while work against them may still be encoded in the context's open command
 * encoder: ParamStore.rehome (the flat moments, gradients and values a stage shards away) and
 * ZeroShards.destroy (the shards, as a trainer is destroyed). Each must send that work to the
 * queue before the buffer is destroyed; a submit after the destroy is the validation error
 * "used in submit while destroyed" (Dawn) / "has been destroyed" (wgpu). Besides the explicit
 * sync here, tests/util/gpu.ts fails a test on any uncaptured error once it ended.
 */
import { gpuTest } from '../util/gpu.ts';
import { type ParamSpec, ParamStore } from '../../src/nn/params.ts';
import { planBuckets } from '../../src/parallel/data/buckets.ts';
import { ZeroShards } from '../../src/parallel/zero/zero_pieces.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const SPECS: ParamSpec[] = [
  { name: 'h.0.w', shape: [8, 16], init: { kind: 'normal', std: 0.02 }, decay: true },
  { name: 'h.0.b', shape: [16], init: { kind: 'const', value: 0 }, decay: false },
];

function store(gpu: Gpu): ParamStore {
  let i = 0;
  return new ParamStore(gpu, SPECS, () => (i++ % 7) / 7 - 0.5);
}

gpuTest('ZeroShards.destroy submits the work still encoded against its shards before destroying them', async (gpu) => {
  const s = store(gpu);
  await gpu.sync();
  const shards = new ZeroShards(gpu, s, planBuckets(s, Infinity), () => ({ rank: 0, size: 2 }), {
    grads: true,
    values: true,
  });
  // Encoded, not submitted: as the last AdamW update is when a trainer is destroyed right after it.
  for (const t of [shards.m, shards.v, shards.g!, shards.values!]) gpu.clear(t);
  shards.destroy();
  await gpu.sync(); // throws the first WebGPU error: the clears submitted after the destroy
  s.destroy();
});

gpuTest('ParamStore.rehome submits the work encoded against a flat buffer before it is freed', async (gpu) => {
  const s = store(gpu);
  await gpu.sync();
  for (const t of [s.m, s.v, s.grads]) gpu.clear(t);
  s.rehome('m', null, [], 'sharded away (test)');
  s.rehome('v', null, [], 'sharded away (test)');
  s.rehome('grad', null, [], 'sharded away (test)');
  // The freed buffers are destroyed once the queue is done; only then is anything else submitted.
  await gpu.device.queue.onSubmittedWorkDone();
  gpu.clear(s.values);
  await gpu.sync(); // throws the first WebGPU error: the clears submitted after the destroy
  s.destroy();
});
