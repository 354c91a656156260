import { equal, ok } from 'node:assert/strict';
import { assertSteps, readLosses, runCli } from '../util/cli.ts';

// One full training step (forward, backward, clip, AdamW, checkpoint, eval, sample) through
// Dawn (npm:webgpu), on SwiftShader where there is no GPU.
Deno.test({
  name: 'Dawn smoke test: one training step through npm:webgpu',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const r = await runCli('train.ts', [
      '--gpu=dawn',
      '--steps',
      '1',
      '--n-layer',
      '1',
      '--n-embd',
      '32',
      '--n-head',
      '2',
      '--block-size',
      '16',
      '--batch-size',
      '4',
      '--eval-batches',
      '1',
      '--sample-tokens',
      '8',
      '--out',
      dir,
    ]);
    equal(r.code, 0, r.stderr);
    ok(/gpu: dawn/.test(r.stdout), r.stdout);
    const losses = await readLosses(`${dir}/metrics.jsonl`);
    assertSteps(losses, 1);
    ok(Math.abs(losses.get(0)! - Math.log(65)) < 0.2, `first loss ${losses.get(0)} ≈ ln 65`);
    ok((await Deno.stat(`${dir}/ckpt.safetensors`)).size > 0);
  },
});
