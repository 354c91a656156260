/**
 * `--pad-vocab` under tensor parallelism (src/models/vocab_pad.ts, vocab_parallel.ts): tp 2 pads
 * the odd 51-character vocabulary to a multiple of 64·2 = 128 (64 rows per rank, rank 1's all
 * padding), the single-rank run to 64; both mask every padded column, so for 10 steps the tp2
 * losses and norms match the single-rank padded run's, which match the unpadded run's, and the
 * padded rows stay zero.
 */
import { equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { maxRel, TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { oddVocabText, twins } from './single_rank.ts';
import { localMeshRun } from './mesh_harness.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { planModelOf } from '../../src/parallel/run/run.ts';
import { parseConfig } from '../../src/train/config.ts';

const TEXT_ODD = oddVocabText(TEXT);

Deno.test({
  name: 'pad-vocab: tp2 with --pad-vocab 64 matches the single-rank padded run and the unpadded one',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig({ padVocab: 64 }), plan = makePlan({ tp: 2 }), single = makePlan({});
    const twin = twins(gpu, TEXT_ODD);
    const ref = await twin(single, over), unpadded = await twin(single, tinyConfig());
    equal(ref.vocabSize, 51);
    const C = parseConfig(over).nEmbd;
    equal(ref.params['transformer.wte.weight'].length, 64 * C, 'single rank: 51 padded to 64 rows');
    ok(maxRel(ref.losses, unpadded.losses) < 1e-4, `padded ${ref.losses} vs unpadded ${unpadded.losses}`);
    const res = await localMeshRun(gpu, plan, over, TEXT_ODD);
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 1e-4, `rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `rank ${r}: norms ${x.gradNorms} vs ${ref.gradNorms}`);
      const wte = x.params['transformer.wte.weight'];
      equal(wte.length, 64 * C, `rank ${r}: 128 rows over tp 2`);
      // Rows ≥ 51 (rank 0's last 13, all of rank 1's) are padding: never selected, no gradient.
      const from = r === 0 ? 51 * C : 0;
      ok(wte.subarray(from).every((v) => v === 0), `rank ${r}: padded rows stay zero`);
      if (r === 0) ok(wte.subarray(0, from).some((v) => v !== 0), 'real rows trained');
    }
    // The plan counts the padded rows: 128 under tp 2, 64 on one rank.
    equal(planModelOf(plan, parseConfig(over), 51).vocabSize, 128);
    equal(planModelOf(single, parseConfig(over), 51).vocabSize, 64);
  },
});
