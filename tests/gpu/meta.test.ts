/**
 * The meta GPU (src/gpu/meta.ts) runs model code with no device: allocations are recorded by size,
 * writes and dispatches do nothing, and a read is refused by name unless zeros were asked for.
 */
import { equal, ok, rejects, throws } from 'node:assert/strict';
import { MetaGpu } from '../../src/gpu/meta.ts';
import { GPT, gptParamSpecs } from '../../src/models/gpt.ts';

const SHAPE = { vocabSize: 65, blockSize: 16, nLayer: 2, nHead: 2, nEmbd: 32, bias: true };

Deno.test('meta GPU: a GPT builds with no device; its store holds the declared parameters, nothing drawn', () => {
  const gpu = new MetaGpu(), m = new GPT(gpu, SHAPE, 1);
  ok(gpu.isMeta);
  const declared = gptParamSpecs(SHAPE).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
  equal(m.params.count, declared);
  // Four flat f32 buffers (values, gradients, AdamW m and v) of the aligned total.
  ok(gpu.allocations.count >= 4);
  ok(gpu.allocations.liveBytes >= 4 * 4 * m.params.flatSize, `${gpu.allocations.liveBytes} B live`);
  m.params.destroy();
  ok(gpu.allocations.liveBytes < 4 * 4 * m.params.flatSize, 'destroy releases the flat buffers');
});

Deno.test('meta GPU: a read names the tensor unless zeros were asked for; writes check the size', async () => {
  const gpu = new MetaGpu(), t = gpu.empty([3], 'f32', 'probe');
  await rejects(gpu.read(t), /probe \[3\] is on a meta GPU/);
  throws(() => gpu.write(t, [1, 2]), /2 values for tensor \[3\]/);
  const zeros = await new MetaGpu({ reads: 'zeros' }).read(new MetaGpu().empty([5], 'i32'));
  equal(zeros.length, 5);
  ok(zeros.every((x) => x === 0));
  throws(() => gpu.startProfiling(), /no kernels to time/);
});
