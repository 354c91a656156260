/**
 * Measuring what autograd tapes keep, for the activation-memory tests: the pool bytes a forward
 * leaves live until its tape is disposed, and the same for one pipeline stage's micro-batch.
 */
import { equal } from 'node:assert/strict';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { type PipelineStageModel, sendForward } from '../../src/parallel/pipeline/pipeline_stage.ts';

/** Pool bytes `run` leaves live (the tapes still open), then the tapes disposed. */
export async function grown(gpu: Gpu, run: () => Promise<Tape[]>): Promise<number> {
  const before = gpu.pool.stats.liveBytes;
  const tapes = await run();
  const delta = gpu.pool.stats.liveBytes - before;
  for (const t of tapes) t.dispose();
  await gpu.sync();
  equal(gpu.pool.stats.liveBytes, before, 'disposing the tapes frees every activation');
  return delta;
}

/**
 * Pool bytes one micro-batch of pipeline stage `stage` of 2 keeps: stage 0 embeds tokens `x` and
 * sends its output on; stage 1 receives an activation (as recv-act allocates it) and runs the head
 * on targets `y`. Both (b, t).
 */
export function stageGrowth(
  gpu: Gpu,
  m: PipelineStageModel,
  stage: 0 | 1,
  x: Int32Array,
  y: Int32Array,
  b: number,
  t: number,
): Promise<number> {
  return grown(gpu, async () => {
    const tape = new Tape(gpu, m.gradMap);
    let h: Tensor;
    if (stage === 0) h = await m.embed(tape, x, b, t);
    else {
      h = tape.alloc(m.actShape(b, t), 'pp.act'); // what recv-act allocates
      tape.requireGrad(h);
    }
    const out = await m.blocks(tape, h, stage, b, t);
    if (stage === 1) await m.head(tape, out, y, 1);
    else sendForward(tape, out, () => new Float32Array(out.size));
    return [tape];
  });
}
